#include "kernels/ref/ops_norm.h"

#include <cmath>

namespace sluice::kernels::ref {

template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                      int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const T m = sum / static_cast<T>(cols);
    T sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += (xr[c] - m) * (xr[c] - m);
    const T s = T(1) / std::sqrt(sq / static_cast<T>(cols) + static_cast<T>(eps));
    for (int64_t c = 0; c < cols; ++c) {
      T v = (xr[c] - m) * s * gamma[c];
      y[r * cols + c] = beta != nullptr ? v + beta[c] : v;
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

template <typename T>
void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy, T* dx,
                       T* dgamma, T* dbeta, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T mean_g = 0;
    T mean_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const T xhat = (xr[c] - mean[r]) * rstd[r];
      const T g = dyr[c] * gamma[c];
      mean_g += g;
      mean_gx += g * xhat;
      dgamma[c] += dyr[c] * xhat;
      if (dbeta != nullptr) dbeta[c] += dyr[c];
    }
    mean_g /= static_cast<T>(cols);
    mean_gx /= static_cast<T>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const T xhat = (xr[c] - mean[r]) * rstd[r];
      dx[r * cols + c] = rstd[r] * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

template <typename T>
void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int64_t rows, int64_t cols,
                    float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += xr[c] * xr[c];
    const T s = T(1) / std::sqrt(sq / static_cast<T>(cols) + static_cast<T>(eps));
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = xr[c] * s * gamma[c];
    rstd[r] = s;
  }
}

template <typename T>
void RmsNormBackward(const T* x, const T* gamma, const T* rstd, const T* dy, T* dx, T* dgamma,
                     int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T mean_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const T xhat = xr[c] * rstd[r];
      mean_gx += dyr[c] * gamma[c] * xhat;
      dgamma[c] += dyr[c] * xhat;
    }
    mean_gx /= static_cast<T>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const T xhat = xr[c] * rstd[r];
      dx[r * cols + c] = rstd[r] * (dyr[c] * gamma[c] - xhat * mean_gx);
    }
  }
}

#define SLUICE_INSTANTIATE(T)                                                                      \
  template void LayerNormForward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t,    \
                                    float);                                                        \
  template void LayerNormBackward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, \
                                     int64_t, int64_t);                                            \
  template void RmsNormForward<T>(const T*, const T*, T*, T*, int64_t, int64_t, float);            \
  template void RmsNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t,        \
                                   int64_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
