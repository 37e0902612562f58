// CPU backend of the linear layer Y = X·Wᵀ + b, weight [out, in] (PyTorch / Hugging Face
// layout). The products go through Gemm (gemm.h), which the process-wide device.cpu_gemm points
// at OpenBLAS (threading itself: OPENBLAS_NUM_THREADS) or at the deterministic GemmFixed (a team
// of num_threads, as for the OpenMP parts: bias, conversions). Same semantics and gradient
// convention as kernels/ref/ops_linear.h: dx overwritten, dw and db accumulated, null skips.
//
// Mixed precision: the *Bf16Weight variants take the bf16 parameter copy (w and b as bf16 bits),
// widen the weight into the caller's workspace (LinearBf16WorkspaceFloats(in, out) floats, so
// the engine accounts it) and run the fp32 GEMM; activations and gradients stay fp32.
#pragma once

#include <cstdint>

#include "kernels/ref/ops_linear.h"

namespace sluice::kernels::cpu {

void LinearForward(const float* x, const float* w, const float* b, float* y, int64_t rows,
                   int64_t in, int64_t out, int num_threads = 0);

void LinearBackward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                    float* db, int64_t rows, int64_t in, int64_t out, int num_threads = 0);

void LinearForwardBf16Weight(const float* x, const uint16_t* w, const uint16_t* b, float* y,
                             int64_t rows, int64_t in, int64_t out, float* workspace,
                             int num_threads = 0);

// The workspace is used only when dx is wanted (dw needs no weight).
void LinearBackwardBf16Weight(const float* x, const uint16_t* w, const float* dy, float* dx,
                              float* dw, float* db, int64_t rows, int64_t in, int64_t out,
                              float* workspace, int num_threads = 0);

}  // namespace sluice::kernels::cpu
