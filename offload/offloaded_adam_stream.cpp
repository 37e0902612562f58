// OffloadedAdam::StreamState: the optimizer state handed out tile by tile for a checkpoint.
//
// On NVMe the reads run ahead through the staging ring: tile t goes to slot (t - first) mod
// buffer_count, up to buffer_count reads are in flight, they are waited for in tile order (each
// verifies its extent checksum), the sink runs on the tile, and its slot then takes the read of
// tile t + buffer_count. So the sink (checksumming and writing the checkpoint) overlaps the NVMe
// reads, and the memory is the ring the step already owns: nothing is allocated. Nothing writes
// the ring meanwhile (a step never runs beside a save), and every read is settled before
// returning, also on failure, so the ring is free for the next step whatever happened.
//
// On the host tier the pieces point straight into the state: no copy.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "offload/offloaded_adam.h"
#include "runtime/logging.h"

namespace sluice::offload {
namespace {

// The reads of one stream, one per slot, and the tile each slot is reading.
class RingReads {
 public:
  explicit RingReads(int slots) : handles_(static_cast<size_t>(slots)) {}
  // Waits for every read still in flight (each slot is then free again); their own errors are
  // logged: the caller is already returning an earlier one.
  ~RingReads() {
    for (SwapHandle& handle : handles_) {
      Status status = handle.Wait();
      if (!status.ok()) {
        SLUICE_LOG(kDebug, "offload", "read settled after a failed state stream: {}",
                   status.ToString());
      }
    }
  }
  RingReads(const RingReads&) = delete;
  RingReads& operator=(const RingReads&) = delete;

  SwapHandle& slot(int index) { return handles_[static_cast<size_t>(index)]; }
  // Waits for the read in `index` and leaves the slot empty.
  Status Take(int index) {
    Status status = slot(index).Wait();
    slot(index) = SwapHandle();
    return status;
  }

 private:
  std::vector<SwapHandle> handles_;
};

}  // namespace

Status OffloadedAdam::StreamState(int64_t begin, int64_t n, const OptimizerStateSink& sink) const {
  SLUICE_RETURN_IF_ERROR(CheckStateRange(begin, n, count_));
  SLUICE_RETURN_IF_ERROR(SettleInFlight());
  if (n == 0) return OkStatus();
  if (on_nvme() && !master_loaded_) {
    return FailedPreconditionError("the offloaded optimizer's NVMe state was never written");
  }
  const int64_t first = begin / grid_.tile_elements;
  const int64_t last = (begin + n - 1) / grid_.tile_elements;
  // The part of `tile` inside the range, as (offset in the tile, elements).
  auto piece_of = [&](int64_t tile) {
    const int64_t from = std::max(begin, grid_.begin(tile));
    const int64_t to = std::min(begin + n, grid_.begin(tile) + grid_.length(tile));
    return std::pair<int64_t, int64_t>(from - grid_.begin(tile), to - from);
  };
  auto hand_over = [&](int64_t tile, int slot) -> Status {
    const auto [within, take] = piece_of(tile);
    const TileState state = StateOf(tile, slot);
    float* const exp_avg_sq = state.exp_avg_sq == nullptr ? nullptr : state.exp_avg_sq + within;
    Status status = sink(grid_.begin(tile) + within, take, state.master + within,
                         state.exp_avg + within, exp_avg_sq);
    return TileError(tile, std::move(status), "handing over the state of");
  };

  if (!on_nvme()) {
    for (int64_t tile = first; tile <= last; ++tile) {
      SLUICE_RETURN_IF_ERROR(hand_over(tile, 0));
    }
    return OkStatus();
  }

  const int slots = options_.buffer_count;
  auto slot_of = [&](int64_t tile) { return static_cast<int>((tile - first) % slots); };
  RingReads reads(slots);
  auto issue = [&](int64_t tile) {
    reads.slot(slot_of(tile)) = nvme_->ReadAsync(tile, ring_.state(slot_of(tile)));
  };
  for (int64_t tile = first; tile <= last && tile < first + slots; ++tile) issue(tile);
  for (int64_t tile = first; tile <= last; ++tile) {
    const int slot = slot_of(tile);
    SLUICE_RETURN_IF_ERROR(TileError(tile, reads.Take(slot), "reading the state of"));
    SLUICE_RETURN_IF_ERROR(hand_over(tile, slot));
    if (tile + slots <= last) issue(tile + slots);
  }
  return OkStatus();
}

}  // namespace sluice::offload
