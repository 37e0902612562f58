// The ZeRO pack/unpack moves of partition_copy.h as segment lists for the ops table's
// CopySegments, built once per layout and uploaded to the device, so that they run as device
// work on a stream instead of host code on device memory. Each list moves exactly the elements
// its host function moves, in the same places (tests/zero/shard_layout_test.cpp holds them to
// each other).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/zero/shard_layout.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// ExtractOwned: full flat buffer -> this rank's shard.
std::vector<ops::CopySegment> ExtractOwnedSegments(const ShardLayout& layout);
// UnpackGathered over `run` with `header` elements per rank piece: gathered -> the full flat
// buffer, or, given `param_offset`, a dense buffer where parameter p starts at param_offset[p]
// (a stage-3 unit's own buffer).
std::vector<ops::CopySegment> UnpackGatheredSegments(const ShardLayout& layout,
                                                     std::span<const int> run, int64_t header = 0,
                                                     std::span<const int64_t> param_offset = {});

// PackForReduceScatter, one list per partition of `run` (in run order): that partition's full
// gradients -> every rank's piece of the bucket, zeros in its padding.
std::vector<std::vector<ops::CopySegment>> PackSegments(const ShardLayout& layout,
                                                        std::span<const int> run);
// AccumulateIntoShard (for AccumulateSegments): this rank's reduced piece -> its gradient shard.
std::vector<ops::CopySegment> AccumulateIntoShardSegments(const ShardLayout& layout,
                                                          std::span<const int> run);

// A segment list in device memory.
class DeviceSegments {
 public:
  // Uploads `segments` to `stream`'s device; complete on return. `what` names it in errors.
  static Result<std::unique_ptr<DeviceSegments>> Create(
      Stream& stream, const std::vector<ops::CopySegment>& segments, std::string_view what);

  const ops::CopySegmentList& list() const { return list_; }

 private:
  DeviceSegments() = default;
  DeviceBuffer buffer_;
  ops::CopySegmentList list_;
};

// `values` copied into new device memory of `stream`'s device (category buffers), complete on
// return; `what` names it in errors.
template <typename V>
Result<DeviceBuffer> UploadArray(Stream& stream, std::span<const V> values, std::string_view what);

}  // namespace sluice::zero
