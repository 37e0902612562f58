// Scalar reference: the MLP activations, elementwise over n values, fp32 or fp64.
// GELU is PyTorch's gelu(approximate="tanh") (GPT-2's, "gelu_new" in Hugging Face); SwiGLU is
// Llama's silu(gate) * up with the gate and up projections in separate arrays. Input gradients
// are overwritten; outputs may alias an input.
#pragma once

#include <cstdint>

namespace sluice::kernels::ref {

// y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
template <typename T>
void GeluForward(const T* x, T* y, int64_t n);

// dx = dy * d gelu(x) / dx, from x (not y). dx may alias dy.
template <typename T>
void GeluBackward(const T* x, const T* dy, T* dx, int64_t n);

// gate, up, y [n]: y = silu(gate) * up, silu(g) = g * sigmoid(g).
template <typename T>
void SwiGluForward(const T* gate, const T* up, T* y, int64_t n);

// dgate = dy * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))); dup = dy * silu(g).
template <typename T>
void SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n);

}  // namespace sluice::kernels::ref
