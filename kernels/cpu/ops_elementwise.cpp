#include "kernels/cpu/ops_elementwise.h"

#include "kernels/cpu/ops_parallel.h"

namespace sluice::kernels::cpu {

void Add(const float* a, const float* b, float* y, int64_t n, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, n);
#pragma omp parallel for simd num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void Accumulate(const float* x, float* y, int64_t n, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, n);
#pragma omp parallel for simd num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void Scale(float* y, float s, int64_t n, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, n);
#pragma omp parallel for simd num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void BiasAddForward(const float* bias, float* y, int64_t rows, int64_t cols, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, rows * cols);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void BiasAddBackward(const float* dy, float* dbias, int64_t rows, int64_t cols, int num_threads) {
  internal::ColumnSums(dy, dbias, rows, cols, num_threads);
}

}  // namespace sluice::kernels::cpu
