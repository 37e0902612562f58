// Scalar reference: LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension, forward and
// backward, fp32 or fp64. Semantics are PyTorch's nn.LayerNorm (biased variance, eps inside the
// square root) and Hugging Face's LlamaRMSNorm (mean of squares, eps inside the square root).
// The forward saves per-row statistics so the backward need not recompute them.
// Gradients: dx is overwritten, dgamma and dbeta accumulate (+=).
#pragma once

#include <cstdint>

namespace sluice::kernels::ref {

// x, y [rows, cols]; gamma, beta [cols] (beta may be null: no bias); mean, rstd [rows] (saved):
// mean[r] = sum_c x[r, c] / cols; var = sum_c (x[r, c] - mean[r])^2 / cols;
// rstd[r] = 1 / sqrt(var + eps); y[r, c] = (x[r, c] - mean[r]) * rstd[r] * gamma[c] + beta[c].
template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                      int64_t rows, int64_t cols, float eps);

// With xhat = (x - mean) * rstd and g = dy * gamma (per element):
// dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)); dgamma += sum_r dy * xhat;
// dbeta += sum_r dy (dbeta may be null).
template <typename T>
void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy, T* dx,
                       T* dgamma, T* dbeta, int64_t rows, int64_t cols);

// x, y [rows, cols]; gamma [cols]; rstd [rows] (saved):
// rstd[r] = 1 / sqrt(sum_c x[r, c]^2 / cols + eps); y[r, c] = x[r, c] * rstd[r] * gamma[c].
template <typename T>
void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int64_t rows, int64_t cols,
                    float eps);

// With xhat = x * rstd and g = dy * gamma: dx = rstd * (g - xhat * mean_c(g * xhat));
// dgamma += sum_r dy * xhat.
template <typename T>
void RmsNormBackward(const T* x, const T* gamma, const T* rstd, const T* dy, T* dx, T* dgamma,
                     int64_t rows, int64_t cols);

}  // namespace sluice::kernels::ref
