// CUDA backend of the elementwise ops of a block: the MLP activations (GELU tanh approximation,
// SwiGLU) and the residual add / gradient accumulation. Same semantics as
// kernels/ref/ops_activation.h and the Add / Accumulate of kernels/ref/ops_elementwise.h, in T
// (math in fp32, one rounding to T per output). Input gradients are overwritten. n is any size
// (16-byte accesses where every pointer is 16-byte aligned, element by element otherwise; the
// results do not depend on which). An output may alias an input of the same index (y = a or b,
// dx = dy, y = x).
//
// T is float or __nv_bfloat16; the templates are instantiated for both in activation.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/launch_status.h"

namespace sluice::kernels::cuda {

// y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
template <typename T>
LaunchStatus GeluForward(const T* x, T* y, int64_t n, cudaStream_t stream);

// dx = dy * gelu'(x), from x (not y).
template <typename T>
LaunchStatus GeluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t stream);

// y = silu(gate) * up, silu(g) = g * sigmoid(g).
template <typename T>
LaunchStatus SwiGluForward(const T* gate, const T* up, T* y, int64_t n, cudaStream_t stream);

// dgate = dy * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))); dup = dy * silu(g).
template <typename T>
LaunchStatus SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n,
                            cudaStream_t stream);

// y = a + b: the residual add (its backward is Accumulate, or dy itself).
template <typename T>
LaunchStatus Add(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream);

// y += x: the gradient of a tensor that feeds two consumers.
template <typename T>
LaunchStatus Accumulate(const T* x, T* y, int64_t n, cudaStream_t stream);

}  // namespace sluice::kernels::cuda
