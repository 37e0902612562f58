// How ZeRO cuts the model's parameters into per-rank shards.
//
// Every parameter is partitioned on its own, as DeepSpeed's ZeRO-3 does
// (partition_parameters.py, _partition_param): with partition = ceil(numel / world), rank r owns
// elements [r * partition, min(numel, (r + 1) * partition)) of the flattened parameter
// (ShardRange, runtime/comm.h); the last rank(s) own fewer, possibly none, and pad their
// partition with zeros up to `partition`. A rank's shard is the concatenation of its padded
// partitions, so every rank's shard has the same length and a parameter's partition sits at the
// same shard offset on every rank. Hence:
//   - a run of consecutive partitions is gathered (or reduce-scattered) by ONE collective of
//     equal pieces, laid out rank-major: [rank 0: p1 | p2 | ...][rank 1: p1 | p2 | ...] ...;
//   - a DeepSpeed checkpoint's per-parameter slices map one to one onto the partitions.
//
// Order of the partitions in a shard: the non-persistent parameters in registry (trace) order,
// then the persistent ones (numel <= stage3_param_persistence_threshold) in registry order. So a
// unit's non-persistent partitions form one contiguous run (one all-gather per unit) and all
// persistent partitions another (one all-gather after each optimizer step). Stages 1 and 2 use the
// same layout without persistent parameters; stage 0 is the layout of a world of one (each rank
// owns the whole flat buffer, in flat order).
//
// Tied parameters (aliases) own no storage and have no partition; their target's does.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/parameter_registry.h"
#include "runtime/comm.h"

namespace sluice::zero {

struct PartitionInfo {
  int param = -1;  // registry index (never an alias)
  int unit = -1;
  int64_t numel = 0;
  int64_t full_offset = 0;   // the parameter's offset in the model's flat layout
  int64_t partition = 0;     // ceil(numel / world): elements per rank, padding included
  int64_t shard_offset = 0;  // the partition's offset in every rank's shard
  bool persistent = false;
};

// A unit's share of the layout.
struct UnitShards {
  // Its non-persistent partitions: indices into partitions() (consecutive), the shard range they
  // cover on each rank, and the full (unpadded) size they gather to.
  std::vector<int> gathered;
  int64_t gather_offset = 0;
  int64_t gather_elements = 0;
  int64_t gathered_numel = 0;
  // All its partitions (persistent ones too), in registry order.
  std::vector<int> all;
};

class ShardLayout {
 public:
  // `persistence_threshold` < 0: no parameter is persistent. CHECK-fails for world < 1 or a rank
  // outside [0, world).
  static ShardLayout Build(const model::ParameterRegistry& registry, int world, int rank,
                           int64_t persistence_threshold);

  int world() const { return world_; }
  int rank() const { return rank_; }
  // Elements of every rank's shard, padding included.
  int64_t shard_elements() const { return shard_elements_; }
  // Elements of the model's flat buffers (no padding).
  int64_t total_elements() const { return total_elements_; }
  // Padding elements of this rank's shard.
  int64_t padding_elements() const;

  // In shard order.
  const std::vector<PartitionInfo>& partitions() const { return partitions_; }
  // The partition of registry parameter `param` (resolving an alias to its target).
  const PartitionInfo& PartitionOf(int param) const;
  const std::vector<UnitShards>& units() const { return units_; }

  // The persistent partitions: indices into partitions() (consecutive), their shard range and
  // their full size.
  const std::vector<int>& persistent() const { return persistent_; }
  int64_t persistent_offset() const { return persistent_offset_; }
  int64_t persistent_elements() const { return persistent_elements_; }
  int64_t persistent_numel() const { return persistent_numel_; }

  // The elements of `p` that `rank` owns: offset within the parameter and count.
  ShardSpan Owned(const PartitionInfo& p, int rank) const {
    return ShardRange(static_cast<size_t>(p.numel), world_, rank);
  }
  ShardSpan Owned(const PartitionInfo& p) const { return Owned(p, rank_); }

 private:
  int world_ = 1;
  int rank_ = 0;
  int64_t shard_elements_ = 0;
  int64_t total_elements_ = 0;
  std::vector<PartitionInfo> partitions_;
  std::vector<int> partition_of_param_;  // registry index -> index into partitions_, -1 alias
  std::vector<int> alias_target_;        // registry index -> target (itself when not an alias)
  std::vector<UnitShards> units_;
  std::vector<int> persistent_;
  int64_t persistent_offset_ = 0;
  int64_t persistent_elements_ = 0;
  int64_t persistent_numel_ = 0;
};

// For each unit, the units whose parameter storage it reads, ascending: itself when it owns
// parameters, plus the owners of the parameters it reads through aliases (a tied LM head reads
// the embeddings). CHECK-fails when a unit reads a later unit's storage: the engine relies on a
// unit's gradient being final once its own backward is done.
std::vector<std::vector<int>> StorageUnitsReadBy(const model::ParameterRegistry& registry);

}  // namespace sluice::zero
