// CPU backend of LayerNorm and RMSNorm over the last dimension: fp32, OpenMP over rows for the
// normalization and over column blocks for dgamma / dbeta (rows summed in order, so results do
// not depend on the thread count). Same semantics and shapes as kernels/ref/ops_norm.h: dx
// overwritten, dgamma and dbeta accumulated, beta / dbeta may be null.
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int64_t rows, int64_t cols, float eps, int num_threads = 0);

void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                       const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows,
                       int64_t cols, int num_threads = 0);

void RmsNormForward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows,
                    int64_t cols, float eps, int num_threads = 0);

void RmsNormBackward(const float* x, const float* gamma, const float* rstd, const float* dy,
                     float* dx, float* dgamma, int64_t rows, int64_t cols, int num_threads = 0);

}  // namespace sluice::kernels::cpu
