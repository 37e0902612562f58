#include "offload/staging_ring.h"

#include <fmt/format.h>

#include <cstring>

namespace sluice::offload {
namespace {

constexpr uint64_t kPage = 4096;

uint64_t PageUp(uint64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

}  // namespace

StagingSlotLayout ComputeStagingSlotLayout(int64_t tile_elements, DType grad_dtype,
                                           DType param_dtype, bool stage_state, int moments) {
  const uint64_t n = static_cast<uint64_t>(tile_elements);
  StagingSlotLayout layout;
  uint64_t at = 0;
  if (stage_state) {
    layout.state_offset = at;
    layout.state_bytes = static_cast<uint64_t>(1 + moments) * n * sizeof(float);
    at += PageUp(layout.state_bytes);
  }
  layout.grads_offset = at;
  layout.grads_bytes = n * DTypeSize(grad_dtype);
  at += PageUp(layout.grads_bytes);
  if (!(stage_state && param_dtype == DType::kF32)) {
    layout.params_offset = at;
    layout.params_bytes = n * DTypeSize(param_dtype);
    at += PageUp(layout.params_bytes);
  }
  layout.slot_bytes = at;
  return layout;
}

Result<StagingRing> StagingRing::Create(Device& device, const StagingSlotLayout& layout,
                                        int buffer_count) {
  StagingRing ring;
  ring.layout_ = layout;
  ring.slots_ = buffer_count;
  const uint64_t bytes = layout.slot_bytes * static_cast<uint64_t>(buffer_count);
  Result<PinnedBuffer> buffer = device.AllocatePinnedHost(bytes, MemoryCategory::kOptimizer);
  if (!buffer.ok()) {
    return Status(buffer.status())
        .WithContext(fmt::format(
            "allocating the optimizer's pinned staging ring ({} slots of {} bytes; lower "
            "zero_optimization.offload_optimizer.buffer_count or sub_group_size)",
            buffer_count, layout.slot_bytes));
  }
  ring.buffer_ = std::move(buffer).value();
  return ring;
}

}  // namespace sluice::offload
