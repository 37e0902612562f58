#include "engine/zero/gather_plan.h"

#include <algorithm>
#include <cstring>

#include "engine/zero/device_segments.h"
#include "engine/zero/partition_copy.h"

namespace sluice::zero {

Result<std::unique_ptr<GatherPlan>> GatherPlan::Create(
    Stream& stream, const std::vector<std::vector<ops::CopySegment>>& unpack, int tags, int world) {
  std::unique_ptr<GatherPlan> plan(new GatherPlan());
  std::vector<ops::CopySegment> all;
  for (const std::vector<ops::CopySegment>& list : unpack) {
    all.insert(all.end(), list.begin(), list.end());
  }
  SLUICE_ASSIGN_OR_RETURN(
      plan->segments_, UploadArray<ops::CopySegment>(stream, all, "the stage-3 unpacking lists"));
  size_t first = 0;
  for (const std::vector<ops::CopySegment>& list : unpack) {
    int64_t largest = 0;
    for (const ops::CopySegment& s : list) largest = std::max(largest, s.count + s.zero_fill);
    plan->lists_.push_back({.data = plan->segments_.data_as<ops::CopySegment>() + first,
                            .count = static_cast<int>(list.size()),
                            .max_segment_elements = largest});
    first += list.size();
  }
  plan->tags_ = tags;
  const size_t bytes = static_cast<size_t>(tags + world) * sizeof(uint32_t);
  Result<PinnedBuffer> words = stream.device().AllocatePinnedHost(bytes, MemoryCategory::kBuffers);
  if (!words.ok()) {
    return Status(words.status()).WithContext("allocating the stage-3 gathers' tag words");
  }
  plan->words_ = std::move(words).value();
  // A 16-bit dtype's tag fills the low half of its word only.
  std::memset(plan->words_.data(), 0, bytes);
  return plan;
}

}  // namespace sluice::zero
