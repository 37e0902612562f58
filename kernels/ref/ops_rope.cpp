#include "kernels/ref/ops_rope.h"

#include <cmath>

#include "kernels/ref/ops_common.h"

namespace sluice::kernels::ref {
namespace {

// sign +1 rotates by +angle (forward), -1 by -angle (backward).
template <typename T>
void Rotate(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
            float theta, int sign, const char* op) {
  if (head_dim % 2 != 0) internal::OpsFail(op, "head_dim = %lld is odd", (long long)head_dim);
  const int64_t half = head_dim / 2;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double inv_freq =
            std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
        const double angle = static_cast<double>(t) * inv_freq;
        const T c = static_cast<T>(std::cos(angle));
        const T s = static_cast<T>(sign * std::sin(angle));
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t base = ((b * seq + t) * heads + h) * head_dim;
          const T lo = x[base + i];
          const T hi = x[base + i + half];
          y[base + i] = lo * c - hi * s;
          y[base + i + half] = hi * c + lo * s;
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void RopeForward(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 float theta) {
  Rotate(x, y, batch, seq, heads, head_dim, theta, +1, "RopeForward");
}

template <typename T>
void RopeBackward(const T* dy, T* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  float theta) {
  Rotate(dy, dx, batch, seq, heads, head_dim, theta, -1, "RopeBackward");
}

#define SLUICE_INSTANTIATE(T)                                                            \
  template void RopeForward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, float); \
  template void RopeBackward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, float);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
