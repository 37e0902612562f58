#include "kernels/cpu/ops_norm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops_parallel.h"
#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu {
namespace {

// dgamma[c] += sum_r dy[r, c] * (x[r, c] - center[r]) * rstd[r] and, when dbeta is not null,
// dbeta[c] += sum_r dy[r, c]. center is null for RMSNorm (no centering).
void NormParamGrads(const float* x, const float* center, const float* rstd, const float* dy,
                    float* dgamma, float* dbeta, int64_t rows, int64_t cols, int num_threads) {
  constexpr int64_t kBlock = internal::kColumnBlock;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const int threads = internal::OpsThreads(num_threads, rows * cols);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t c0 = block * kBlock;
    const int64_t width = std::min(kBlock, cols - c0);
    float acc_gamma[kBlock] = {};
    float acc_beta[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols + c0;
      const float* dyr = dy + r * cols + c0;
      const float m = center != nullptr ? center[r] : 0.0f;
      const float s = rstd[r];
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) {
        acc_gamma[c] += dyr[c] * ((xr[c] - m) * s);
        acc_beta[c] += dyr[c];
      }
    }
    for (int64_t c = 0; c < width; ++c) dgamma[c0 + c] += acc_gamma[c];
    if (dbeta != nullptr) {
      for (int64_t c = 0; c < width; ++c) dbeta[c0 + c] += acc_beta[c];
    }
  }
}

}  // namespace

void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int64_t rows, int64_t cols, float eps, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, rows * cols);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      vec->layernorm_forward_row(x + r * cols, gamma, beta, y + r * cols, mean + r, rstd + r, cols,
                                 eps);
    }
    return;
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const float m = sum * inv_cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += (xr[c] - m) * (xr[c] - m);
    const float s = 1.0f / std::sqrt(sq * inv_cols + eps);
    if (beta != nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * s * gamma[c];
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                       const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows,
                       int64_t cols, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, rows * cols);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      vec->layernorm_backward_row(x + r * cols, gamma, mean[r], rstd[r], dy + r * cols,
                                  dx + r * cols, cols);
    }
    NormParamGrads(x, mean, rstd, dy, dgamma, dbeta, rows, cols, num_threads);
    return;
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    const float m = mean[r];
    const float s = rstd[r];
    float sum_g = 0.0f;
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < cols; ++c) {
      const float g = dyr[c] * gamma[c];
      sum_g += g;
      sum_gx += g * ((xr[c] - m) * s);
    }
    const float mean_g = sum_g * inv_cols;
    const float mean_gx = sum_gx * inv_cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      dxr[c] = s * (dyr[c] * gamma[c] - mean_g - (xr[c] - m) * s * mean_gx);
    }
  }
  NormParamGrads(x, mean, rstd, dy, dgamma, dbeta, rows, cols, num_threads);
}

void RmsNormForward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows,
                    int64_t cols, float eps, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, rows * cols);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      vec->rmsnorm_forward_row(x + r * cols, gamma, y + r * cols, rstd + r, cols, eps);
    }
    return;
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += xr[c] * xr[c];
    const float s = 1.0f / std::sqrt(sq * inv_cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * s * gamma[c];
    rstd[r] = s;
  }
}

void RmsNormBackward(const float* x, const float* gamma, const float* rstd, const float* dy,
                     float* dx, float* dgamma, int64_t rows, int64_t cols, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, rows * cols);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      vec->rmsnorm_backward_row(x + r * cols, gamma, rstd[r], dy + r * cols, dx + r * cols, cols);
    }
    NormParamGrads(x, nullptr, rstd, dy, dgamma, nullptr, rows, cols, num_threads);
    return;
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    const float s = rstd[r];
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t c = 0; c < cols; ++c) sum_gx += dyr[c] * gamma[c] * (xr[c] * s);
    const float mean_gx = sum_gx * inv_cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dxr[c] = s * (dyr[c] * gamma[c] - xr[c] * s * mean_gx);
  }
  NormParamGrads(x, nullptr, rstd, dy, dgamma, nullptr, rows, cols, num_threads);
}

}  // namespace sluice::kernels::cpu
