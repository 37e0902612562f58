// Moving values between the model's full (flat, per-parameter) layout and the rank-major buffers
// of coalesced collectives over a ShardLayout's partitions: what runs around each all-gather and
// reduce-scatter. Single-threaded: these run on the comm stream next to the collective.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "engine/zero/shard_layout.h"
#include "offload/dtype_convert.h"
#include "runtime/dtype.h"

namespace sluice::zero {

// Where a parameter's full fp32 values (or gradients) start, by partition.
using FullPointer = std::function<float*(const PartitionInfo&)>;
using ConstFullPointer = std::function<const float*(const PartitionInfo&)>;

// Elements of one rank's piece of a collective over `run`: the sum of their partitions.
int64_t RunElements(const ShardLayout& layout, std::span<const int> run);

// `gathered` holds world pieces of `header` + RunElements(run) elements of `dtype`, rank-major,
// each piece `header` elements the caller uses (a tag) and then the partitions of `run` in order
// (what an all-gather of the run's shard range yields). Writes every rank's owned elements of
// each parameter, widened to fp32, to dst(p) + their offset.
void UnpackGathered(const ShardLayout& layout, std::span<const int> run, const void* gathered,
                    DType dtype, const FullPointer& dst, int64_t header = 0);

// The inverse for reduce-scatter: fills `bucket` (world pieces of RunElements(run) fp32
// elements, rank-major) from the full gradients src(p), zeros in the padding.
void PackForReduceScatter(const ShardLayout& layout, std::span<const int> run,
                          const ConstFullPointer& src, float* bucket);

// Adds this rank's reduced piece (RunElements(run) elements, partitions of `run` in order) into
// its fp32 gradient shard at each partition's shard offset.
void AccumulateIntoShard(const ShardLayout& layout, std::span<const int> run, const float* piece,
                         float* grad_shard);

// Copies this rank's owned elements of every parameter from the full flat buffer `full` into
// its shard (padding left as it is).
void ExtractOwned(const ShardLayout& layout, const float* full, float* shard);

// (fp32 <-> `dtype` conversions: offload/dtype_convert.h.)
// Rounds each value to `dtype` and back, in place (f16: past 65504 becomes inf).
void RoundThrough(float* data, int64_t n, DType dtype, int num_threads);

}  // namespace sluice::zero
