#include "runtime/ops/block_squared_sums.h"

#include <omp.h>

namespace sluice::ops {

void BlockSquaredSumsOnHost(const float* x, const BlockSumList& list, double* out, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
#pragma omp parallel for num_threads(threads) if (threads > 1 && list.blocks > 1) schedule(static)
  for (int64_t j = 0; j < list.blocks; ++j) {
    double sum = 0.0;
    for (int64_t p = list.first[j]; p < list.first[j + 1]; ++p) {
      const float* g = x + list.pieces[p].offset;
      for (int64_t i = 0; i < list.pieces[p].count; ++i) {
        const double v = g[i];
        sum += v * v;
      }
    }
    out[j] = sum;
  }
}

}  // namespace sluice::ops
