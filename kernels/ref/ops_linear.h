// Scalar reference: the linear layer Y = X·Wᵀ + b with PyTorch nn.Linear's (and Hugging Face's)
// weight layout [out, in], in fp32 or fp64, plus the variant whose weight and bias are stored as
// bf16 (mixed precision: the low-precision parameter copy, fp32 compute).
//
// Gradient convention of every op kernel: gradients of inputs (dx) are overwritten; gradients of
// parameters (dw, db) are accumulated (+=), as PyTorch accumulates into .grad, so that a tied
// weight (embedding and LM head) and gradient accumulation over micro-batches need no extra
// buffer. A null gradient pointer skips that gradient.
#pragma once

#include <cstdint>

namespace sluice::kernels {

// Floats of the workspace the bf16-weight linear variants need: the weight widened to fp32.
inline int64_t LinearBf16WorkspaceFloats(int64_t in, int64_t out) { return in * out; }

}  // namespace sluice::kernels

namespace sluice::kernels::ref {

// x [rows, in], w [out, in], b [out] or null, y [rows, out]:
// y[r, o] = sum_i x[r, i] * w[o, i] + b[o].
template <typename T>
void LinearForward(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t in, int64_t out);

// dy [rows, out]. dx [rows, in] = dy·W (overwritten); dw [out, in] += dyᵀ·X;
// db [out] += sum over rows of dy. Any of dx, dw, db may be null.
template <typename T>
void LinearBackward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int64_t rows,
                    int64_t in, int64_t out);

// As LinearForward with w [out, in] and b [out] (or null) holding bf16 bits. The weight is
// widened into workspace (LinearBf16WorkspaceFloats(in, out) floats), then the fp32 op runs.
void LinearForwardBf16Weight(const float* x, const uint16_t* w, const uint16_t* b, float* y,
                             int64_t rows, int64_t in, int64_t out, float* workspace);

// As LinearBackward with a bf16 weight; gradients are fp32. The workspace is used only when dx
// is wanted.
void LinearBackwardBf16Weight(const float* x, const uint16_t* w, const float* dy, float* dx,
                              float* dw, float* db, int64_t rows, int64_t in, int64_t out,
                              float* workspace);

}  // namespace sluice::kernels::ref
