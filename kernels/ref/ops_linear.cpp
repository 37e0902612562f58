#include "kernels/ref/ops_linear.h"

#include "kernels/ref/ops_convert.h"

namespace sluice::kernels::ref {

template <typename T>
void LinearForward(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t in,
                   int64_t out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      T sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
      y[r * out + o] = b != nullptr ? sum + b[o] : sum;
    }
  }
}

template <typename T>
void LinearBackward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int64_t rows,
                    int64_t in, int64_t out) {
  if (dx != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < in; ++i) {
        T sum = 0;
        for (int64_t o = 0; o < out; ++o) sum += dy[r * out + o] * w[o * in + i];
        dx[r * in + i] = sum;
      }
    }
  }
  if (dw != nullptr) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        T sum = 0;
        for (int64_t r = 0; r < rows; ++r) sum += dy[r * out + o] * x[r * in + i];
        dw[o * in + i] += sum;
      }
    }
  }
  if (db != nullptr) {
    for (int64_t o = 0; o < out; ++o) {
      T sum = 0;
      for (int64_t r = 0; r < rows; ++r) sum += dy[r * out + o];
      db[o] += sum;
    }
  }
}

void LinearForwardBf16Weight(const float* x, const uint16_t* w, const uint16_t* b, float* y,
                             int64_t rows, int64_t in, int64_t out, float* workspace) {
  ConvertBf16ToF32(w, workspace, in * out);
  LinearForward<float>(x, workspace, nullptr, y, rows, in, out);
  if (b == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) y[r * out + o] += Bf16ToF32(b[o]);
  }
}

void LinearBackwardBf16Weight(const float* x, const uint16_t* w, const float* dy, float* dx,
                              float* dw, float* db, int64_t rows, int64_t in, int64_t out,
                              float* workspace) {
  if (dx != nullptr) ConvertBf16ToF32(w, workspace, in * out);
  LinearBackward<float>(x, dx != nullptr ? workspace : nullptr, dy, dx, dw, db, rows, in, out);
}

#define SLUICE_INSTANTIATE(T)                                                                  \
  template void LinearForward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t); \
  template void LinearBackward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t,  \
                                  int64_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
