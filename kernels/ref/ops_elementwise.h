// Scalar reference: the residual add, gradient accumulation, scaling and the bias add, fp32 or
// fp64.
// All tensors are dense row-major arrays; shapes are in each comment.
#pragma once

#include <cstdint>

namespace sluice::kernels::ref {

// y[i] = a[i] + b[i] for i < n: the residual add. y may alias a or b. Its backward hands dy to
// both inputs unchanged, so it needs no function of its own beyond Accumulate.
template <typename T>
void Add(const T* a, const T* b, T* y, int64_t n);

// y[i] += x[i] for i < n: sums the gradients of a tensor that feeds two consumers.
template <typename T>
void Accumulate(const T* x, T* y, int64_t n);

// y[i] = y[i] * s for i < n, each product rounded once to T: the scaling of gradients around
// their reduction (DeepSpeed's gradient_predivide_factor and prescale_gradients).
template <typename T>
void Scale(T* y, T s, int64_t n);

// y [rows, cols]: y[r, c] += bias[c].
template <typename T>
void BiasAddForward(const T* bias, T* y, int64_t rows, int64_t cols);

// dy [rows, cols], dbias [cols]: dbias[c] += sum over r of dy[r, c] (accumulates, like every
// parameter gradient).
template <typename T>
void BiasAddBackward(const T* dy, T* dbias, int64_t rows, int64_t cols);

}  // namespace sluice::kernels::ref
