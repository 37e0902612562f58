// What the stage-3 gathers (ParameterCoordinator) need on the device and in pinned memory, made
// once when the coordinator is created, so that a gather is stream work only: the host never
// reads or writes the device memory it moves.
//
// A gather run (one unit's gather group, or the persistent parameters) all-gathers, per rank, a
// tag word and then the rank's partitions of the run; its unpacking is one ops CopySegments from
// the gathered staging buffer into the run's dense fp32 buffer, converting from the parameter
// dtype, over the segment list built here (all runs' lists in one device array). The tags travel
// through pinned host words: the word this rank sends (copied host to device into its piece) and
// every rank's word copied back after the all-gather, which a host function then compares. The
// comm stream runs one gather at a time, so one set of words serves every gather.
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

class GatherPlan {
 public:
  // Uploads `unpack` (one segment list per run) to `stream`'s device (complete on return) and
  // allocates the pinned tag words: `tags` words to send (zero until SetSendWord) and one word
  // per rank of `world`.
  static Result<std::unique_ptr<GatherPlan>> Create(
      Stream& stream, const std::vector<std::vector<ops::CopySegment>>& unpack, int tags,
      int world);

  const ops::CopySegmentList& unpack(int run) const { return lists_[static_cast<size_t>(run)]; }
  // The word sent with tag index `index` (< tags): host memory, read by host-to-device copies.
  // Set them all before the first gather; the NVMe path writes its own from a host function.
  uint32_t* send_word(int index) const { return words() + index; }
  // The world's words, rank r's at [r], written by a device-to-host copy of each rank's first
  // element after the all-gather (its low DTypeSize bytes: the rest stay zero).
  uint32_t* received() const { return words() + tags_; }

 private:
  GatherPlan() = default;
  uint32_t* words() const { return words_.data_as<uint32_t>(); }

  DeviceBuffer segments_;
  std::vector<ops::CopySegmentList> lists_;
  PinnedBuffer words_;
  int tags_ = 0;
};

}  // namespace sluice::zero
