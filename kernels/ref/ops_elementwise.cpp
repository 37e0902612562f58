#include "kernels/ref/ops_elementwise.h"

namespace sluice::kernels::ref {

template <typename T>
void Add(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <typename T>
void Accumulate(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <typename T>
void Scale(T* y, T s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

template <typename T>
void BiasAddForward(const T* bias, T* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
  }
}

template <typename T>
void BiasAddBackward(const T* dy, T* dbias, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    T sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
    dbias[c] += sum;
  }
}

#define SLUICE_INSTANTIATE(T)                                      \
  template void Add<T>(const T*, const T*, T*, int64_t);           \
  template void Accumulate<T>(const T*, T*, int64_t);              \
  template void Scale<T>(T*, T, int64_t);                          \
  template void BiasAddForward<T>(const T*, T*, int64_t, int64_t); \
  template void BiasAddBackward<T>(const T*, T*, int64_t, int64_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
