#include <algorithm>

#include "engine/zero/offloaded_adam.h"

namespace sluice::zero {

Status OffloadedAdam::StreamState(int64_t begin, int64_t n, const OffloadStateSink& sink) const {
  if (begin < 0 || n < 0 || begin + n > count_) {
    return OutOfRangeError("optimizer state range [{}, {}) is outside the shard of {} elements",
                           begin, begin + n, count_);
  }
  if (on_nvme() && !master_loaded_ && n > 0) {
    return FailedPreconditionError("the offloaded optimizer's NVMe state was never written");
  }
  for (int64_t at = begin; at < begin + n;) {
    const int64_t tile = at / grid_.tile_elements;
    const int64_t within = at - grid_.begin(tile);
    const int64_t take = std::min(begin + n - at, grid_.length(tile) - within);
    SLUICE_RETURN_IF_ERROR(FetchStateSerial(tile));
    const TileState state = StateOf(tile, 0);
    SLUICE_RETURN_IF_ERROR(
        sink(at, take, state.master + within, state.exp_avg + within, state.exp_avg_sq + within));
    at += take;
  }
  return OkStatus();
}

}  // namespace sluice::zero
