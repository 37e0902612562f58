// The pinned staging ring of the offloaded optimizer: `buffer_count` slots of one tile each, in
// one page-locked allocation (charged to the ledger as host_pinned / optimizer). A slot holds:
//   state   p | m | v of the tile (Lion: p | m), fp32, back to back (NVMe tier only: the unit of
//           one read and one write; the host tier updates its state in place);
//   grads   the tile's gradients in their training dtype, copied device-to-host;
//   params  the updated parameters in the parameter dtype, copied host-to-device (absent for
//           fp32 parameters on NVMe: the state's p is that copy).
// Every region starts on a 4 KiB boundary, as O_DIRECT and DMA want.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::offload {

struct StagingSlotLayout {
  uint64_t state_offset = 0;
  uint64_t state_bytes = 0;  // 0 when the state is not staged
  uint64_t grads_offset = 0;
  uint64_t grads_bytes = 0;
  uint64_t params_offset = 0;
  uint64_t params_bytes = 0;  // 0 when the state's p is sent to the device directly
  uint64_t slot_bytes = 0;    // a multiple of 4 KiB
};

// For tiles of at most `tile_elements` elements, with `moments` moment tensors (2: Adam, 1: Lion).
// With tile_elements a multiple of 2048 no region is padded, and slot_bytes = tile_elements x
// (4 x (1 + moments) if staged + grad size + param size if any).
StagingSlotLayout ComputeStagingSlotLayout(int64_t tile_elements, DType grad_dtype,
                                           DType param_dtype, bool stage_state, int moments = 2);

class StagingRing {
 public:
  static Result<StagingRing> Create(Device& device, const StagingSlotLayout& layout,
                                    int buffer_count);

  StagingRing() = default;
  StagingRing(StagingRing&&) = default;
  StagingRing& operator=(StagingRing&&) = default;

  const StagingSlotLayout& layout() const { return layout_; }
  int slots() const { return slots_; }
  std::byte* slot(int index) const { return base() + layout_.slot_bytes * index; }
  float* state(int index) const {
    return reinterpret_cast<float*>(slot(index) + layout_.state_offset);
  }
  std::byte* grads(int index) const { return slot(index) + layout_.grads_offset; }
  std::byte* params(int index) const { return slot(index) + layout_.params_offset; }
  std::byte* base() const { return buffer_.data_as<std::byte>(); }
  uint64_t bytes() const { return buffer_.size(); }
  bool page_locked() const { return buffer_.page_locked(); }

 private:
  StagingSlotLayout layout_;
  int slots_ = 0;
  PinnedBuffer buffer_;
};

}  // namespace sluice::offload
