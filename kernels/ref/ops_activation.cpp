#include "kernels/ref/ops_activation.h"

#include <cmath>

namespace sluice::kernels::ref {
namespace {

template <typename T>
constexpr T kGeluC = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
template <typename T>
constexpr T kGeluA = static_cast<T>(0.044715);

template <typename T>
T Sigmoid(T g) {
  return T(1) / (T(1) + std::exp(-g));
}

}  // namespace

template <typename T>
void GeluForward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T t = std::tanh(kGeluC<T> * (v + kGeluA<T> * v * v * v));
    y[i] = T(0.5) * v * (T(1) + t);
  }
}

template <typename T>
void GeluBackward(const T* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T t = std::tanh(kGeluC<T> * (v + kGeluA<T> * v * v * v));
    const T du = kGeluC<T> * (T(1) + T(3) * kGeluA<T> * v * v);
    dx[i] = dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
  }
}

template <typename T>
void SwiGluForward(const T* gate, const T* up, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] * Sigmoid(gate[i]) * up[i];
}

template <typename T>
void SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    const T s = Sigmoid(g);
    const T u = up[i];
    const T d = dy[i];
    dgate[i] = d * u * s * (T(1) + g * (T(1) - s));
    dup[i] = d * g * s;
  }
}

#define SLUICE_INSTANTIATE(T)                                      \
  template void GeluForward<T>(const T*, T*, int64_t);             \
  template void GeluBackward<T>(const T*, const T*, T*, int64_t);  \
  template void SwiGluForward<T>(const T*, const T*, T*, int64_t); \
  template void SwiGluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
