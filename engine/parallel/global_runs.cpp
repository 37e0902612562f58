#include "engine/parallel/global_runs.h"

#include <algorithm>

#include "runtime/check.h"

namespace sluice::parallel {

std::vector<GlobalRun> GlobalRunsOf(const TensorSharding& sharding, int64_t begin, int64_t end) {
  SLUICE_CHECK_LE(begin, end) << "local range of " << sharding.ToString();
  std::vector<GlobalRun> runs;
  if (begin == end) return runs;
  if (!sharding.split()) {
    runs.push_back({.local_begin = begin, .global_begin = begin, .count = end - begin});
    return runs;
  }
  const Shape local = sharding.LocalShape();
  int64_t inner = 1;
  for (int d = sharding.dim + 1; d < local.rank(); ++d) inner *= local.dim(d);
  const int64_t local_dim = local.dim(sharding.dim);
  // Where each block's piece ends along the split dimension, in local rows.
  std::vector<int64_t> piece_ends;
  if (sharding.blocks.empty()) {
    piece_ends.push_back(local_dim);
  } else {
    int64_t at = 0;
    for (const int64_t block : sharding.blocks) piece_ends.push_back(at += block / sharding.degree);
  }
  for (int64_t e = begin; e < end;) {
    const int64_t slab = e / (inner * local_dim);  // the outer coordinates
    const int64_t row = (e / inner) % local_dim;
    const int64_t piece_end = *std::upper_bound(piece_ends.begin(), piece_ends.end(), row);
    const int64_t run_end = std::min(end, (slab * local_dim + piece_end) * inner);
    runs.push_back(
        {.local_begin = e, .global_begin = sharding.GlobalIndex(e), .count = run_end - e});
    e = run_end;
  }
  return runs;
}

}  // namespace sluice::parallel
