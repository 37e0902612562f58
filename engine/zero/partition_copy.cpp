#include "engine/zero/partition_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "offload/dtype_convert.h"
#include "runtime/check.h"

namespace sluice::zero {

int64_t RunElements(const ShardLayout& layout, std::span<const int> run) {
  int64_t elements = 0;
  for (int index : run) elements += layout.partitions()[static_cast<size_t>(index)].partition;
  return elements;
}

void UnpackGathered(const ShardLayout& layout, std::span<const int> run, const void* gathered,
                    DType dtype, const FullPointer& dst, int64_t header) {
  const int64_t piece = header + RunElements(layout, run);
  const size_t element_size = DTypeSize(dtype);
  const auto* bytes = static_cast<const uint8_t*>(gathered);
  for (int r = 0; r < layout.world(); ++r) {
    int64_t at = r * piece + header;
    for (int index : run) {
      const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
      const ShardSpan owned = layout.Owned(p, r);
      offload::ConvertToF32(bytes + static_cast<size_t>(at) * element_size, dtype,
                            dst(p) + owned.offset, static_cast<int64_t>(owned.count), 1);
      at += p.partition;
    }
  }
}

void PackForReduceScatter(const ShardLayout& layout, std::span<const int> run,
                          const ConstFullPointer& src, float* bucket) {
  const int64_t piece = RunElements(layout, run);
  for (int r = 0; r < layout.world(); ++r) {
    float* out = bucket + r * piece;
    for (int index : run) {
      const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
      const ShardSpan owned = layout.Owned(p, r);
      std::memcpy(out, src(p) + owned.offset, owned.count * sizeof(float));
      std::fill(out + owned.count, out + p.partition, 0.0f);
      out += p.partition;
    }
  }
}

void AccumulateIntoShard(const ShardLayout& layout, std::span<const int> run, const float* piece,
                         float* grad_shard) {
  for (int index : run) {
    const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
    float* out = grad_shard + p.shard_offset;
    // Each element is one addition: any split over threads gives the same bits.
#pragma omp parallel for schedule(static) if (p.partition >= (int64_t{1} << 20))
    for (int64_t i = 0; i < p.partition; ++i) out[i] += piece[i];
    piece += p.partition;
  }
}

void ExtractOwned(const ShardLayout& layout, const float* full, float* shard) {
  for (const PartitionInfo& p : layout.partitions()) {
    const ShardSpan owned = layout.Owned(p);
    std::memcpy(shard + p.shard_offset, full + p.full_offset + owned.offset,
                owned.count * sizeof(float));
  }
}

void RoundThrough(float* data, int64_t n, DType dtype, int num_threads) {
  if (dtype == DType::kF32) return;
  // A bounded scratch block: rounding a whole shard must not need a second shard-size buffer.
  constexpr int64_t kBlock = int64_t{1} << 16;
  std::vector<uint16_t> half(static_cast<size_t>(std::min(n, kBlock)));
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t count = std::min(kBlock, n - begin);
    offload::ConvertFromF32(data + begin, half.data(), dtype, count, num_threads);
    offload::ConvertToF32(half.data(), dtype, data + begin, count, num_threads);
  }
}

}  // namespace sluice::zero
