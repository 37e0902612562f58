// Internal helpers of the CPU op kernels (kernels/cpu/ops_*.cpp): how many OpenMP threads a
// region gets, BLAS size narrowing, and the deterministic column sums behind every bias-like
// gradient.
#pragma once

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/ref/ops_common.h"

namespace sluice::kernels::cpu::internal {

// Below this many elements of work, waking a thread team costs more than it saves.
inline constexpr int64_t kMinParallelWork = 1 << 15;

// The team size for a region over `work` elements: the caller's count (0 means OpenMP's
// default, omp_get_max_threads()), or 1 when the work is below min_work (a kernel whose unit of
// work is much cheaper than an element's, such as a multiply-add, passes its own).
inline int OpsThreads(int requested, int64_t work, int64_t min_work = kMinParallelWork) {
  if (work < min_work) return 1;
  return requested > 0 ? requested : omp_get_max_threads();
}

// cblas takes int sizes: larger ones are a caller error, not something to truncate.
inline int BlasInt(int64_t value, const char* op) {
  if (value < 0 || value > INT_MAX) {
    sluice::kernels::internal::OpsFail(op, "size %lld does not fit a BLAS int", (long long)value);
  }
  return static_cast<int>(value);
}

// Columns per block of ColumnSums. Fixed, not derived from the team size, so the summation
// order (and so every bit of the result) does not depend on the thread count.
inline constexpr int64_t kColumnBlock = 256;

// out[c] += sum over r of a[r * cols + c], rows summed in order for each column; threads split
// the columns.
inline void ColumnSums(const float* a, float* out, int64_t rows, int64_t cols, int num_threads) {
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  const int threads = OpsThreads(num_threads, rows * cols);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t c0 = block * kColumnBlock;
    const int64_t width = std::min(kColumnBlock, cols - c0);
    float acc[kColumnBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = a + r * cols + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) acc[c] += row[c];
    }
    for (int64_t c = 0; c < width; ++c) out[c0 + c] += acc[c];
  }
}

// fn(begin, end) over [0, n) in one contiguous chunk per thread of a team of `threads`, chunk
// bounds on 64-element (cache-line) multiples.
template <typename Fn>
void ParallelChunks(int64_t n, int threads, const Fn& fn) {
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t per = ((n + threads - 1) / threads + 63) / 64 * 64;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = std::min<int64_t>(n, t * per);
    const int64_t end = std::min<int64_t>(n, begin + per);
    if (begin < end) fn(begin, end);
  }
}

}  // namespace sluice::kernels::cpu::internal
