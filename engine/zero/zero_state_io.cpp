#include "engine/zero/zero_state_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace sluice::zero {

std::vector<ZeroStateRange> OwnedStateRanges(const ShardLayout& layout) {
  std::vector<ZeroStateRange> ranges;
  for (const PartitionInfo& p : layout.partitions()) {
    const ShardSpan owned = layout.Owned(p);
    if (owned.count == 0) continue;
    const int64_t begin = static_cast<int64_t>(owned.offset);
    ranges.push_back({.param = p.param,
                      .begin = begin,
                      .end = begin + static_cast<int64_t>(owned.count),
                      .shard_offset = p.shard_offset});
  }
  return ranges;
}

Status CheckStateReaders(const ZeroStateReaders& readers, OptimizerType optimizer) {
  const bool moments = static_cast<bool>(readers.exp_avg);
  // Lion keeps exp_avg only; Adam both moments.
  const bool second_moment = OptimizerMoments(optimizer) == 2;
  if (!readers.master || (moments && second_moment != static_cast<bool>(readers.exp_avg_sq)) ||
      (!moments && (readers.exp_avg_sq || readers.optimizer_step != 0))) {
    return InvalidArgumentError(
        "ImportState needs master weights, and {} (without them the optimizer step count must "
        "be 0, not {})",
        second_moment ? "exp_avg and exp_avg_sq together" : "for Lion exp_avg alone",
        readers.optimizer_step);
  }
  return OkStatus();
}

offload::OptimizerStateSource StateSourceOf(const ShardLayout& layout,
                                            const model::ParameterRegistry& registry,
                                            const ZeroStateReaders& readers) {
  // Tile by tile, as the optimizer asks: each piece of the shard is filled from the readers of
  // the partitions it overlaps; padding stays zero, as a fresh shard's.
  return [&layout, &registry, &readers](int64_t begin, int64_t n, float* master, float* exp_avg,
                                        float* exp_avg_sq) -> Status {
    const bool moments = static_cast<bool>(readers.exp_avg);
    const std::vector<PartitionInfo>& partitions = layout.partitions();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    std::memset(master, 0, bytes);
    std::memset(exp_avg, 0, bytes);
    if (exp_avg_sq != nullptr) std::memset(exp_avg_sq, 0, bytes);
    // The first partition ending after `begin` (partitions are in shard order).
    auto it = std::upper_bound(
        partitions.begin(), partitions.end(), begin,
        [](int64_t at, const PartitionInfo& p) { return at < p.shard_offset + p.partition; });
    for (; it != partitions.end() && it->shard_offset < begin + n; ++it) {
      const PartitionInfo& p = *it;
      const ShardSpan owned = layout.Owned(p);
      const int64_t lo = std::max(begin, p.shard_offset);
      const int64_t hi = std::min(begin + n, p.shard_offset + static_cast<int64_t>(owned.count));
      if (lo >= hi) continue;  // only padding of this partition in the piece
      const int64_t first = static_cast<int64_t>(owned.offset) + (lo - p.shard_offset);
      const int64_t last = first + (hi - lo);
      auto read = [&](const ZeroRangeReader& reader, float* dst, const char* what) -> Status {
        Status status = reader(p.param, first, last, dst + (lo - begin));
        if (status.ok()) return status;
        return std::move(status).WithContext(fmt::format("loading {} of {} elements [{}, {})", what,
                                                         registry.parameter(p.param).name, first,
                                                         last));
      };
      SLUICE_RETURN_IF_ERROR(read(readers.master, master, "the master weights"));
      if (moments) {
        SLUICE_RETURN_IF_ERROR(read(readers.exp_avg, exp_avg, "exp_avg"));
        if (exp_avg_sq != nullptr) {
          SLUICE_RETURN_IF_ERROR(read(readers.exp_avg_sq, exp_avg_sq, "exp_avg_sq"));
        }
      }
    }
    return OkStatus();
  };
}

}  // namespace sluice::zero
