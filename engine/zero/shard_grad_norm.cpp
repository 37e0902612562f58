#include "engine/zero/shard_grad_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sluice::zero {

std::vector<const PartitionInfo*> PartitionsInFlatOrder(const ShardLayout& layout,
                                                        const NormCounted& counted) {
  std::vector<const PartitionInfo*> in_flat_order;
  in_flat_order.reserve(layout.partitions().size());
  for (const PartitionInfo& p : layout.partitions()) {
    if (counted.empty() || counted[static_cast<size_t>(p.param)]) in_flat_order.push_back(&p);
  }
  std::sort(in_flat_order.begin(), in_flat_order.end(),
            [](const PartitionInfo* a, const PartitionInfo* b) {
              return a->full_offset < b->full_offset;
            });
  return in_flat_order;
}

double LocalSquaredSum(const ShardLayout& layout, const float* grad_shard,
                       const NormCounted& counted) {
  double total = 0.0;
  double block_sum = 0.0;
  int64_t block = -1;
  for (const PartitionInfo* p : PartitionsInFlatOrder(layout, counted)) {
    const ShardSpan owned = layout.Owned(*p);
    const float* g = grad_shard + p->shard_offset;
    int64_t flat = p->full_offset + static_cast<int64_t>(owned.offset);
    const int64_t flat_end = flat + static_cast<int64_t>(owned.count);
    while (flat < flat_end) {
      const int64_t b = flat / kNormBlock;
      if (b != block) {
        if (block >= 0) total += block_sum;
        block_sum = 0.0;
        block = b;
      }
      const int64_t end = std::min(flat_end, (b + 1) * kNormBlock);
      for (; flat < end; ++flat, ++g) {
        const double v = *g;
        block_sum += v * v;
      }
    }
  }
  if (block >= 0) total += block_sum;
  return total;
}

double ClipCoefficient(double norm, double max_norm) {
  if (max_norm <= 0.0 || !std::isfinite(norm)) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

}  // namespace sluice::zero
