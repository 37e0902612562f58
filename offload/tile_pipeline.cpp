#include "offload/tile_pipeline.h"

#include <algorithm>
#include <vector>

#include "runtime/check.h"
#include "runtime/logging.h"

namespace sluice::offload {

int TileReadAhead(const TilePipelineOptions& options) {
  if (!options.pipeline_read || options.buffer_count < 2) return 0;
  return std::max(1, options.buffer_count - (options.pipeline_write ? 2 : 1));
}

namespace {

class TileRing {
 public:
  TileRing(int64_t num_tiles, const TilePipelineOptions& options, const TilePipelineHooks& hooks)
      : num_tiles_(num_tiles),
        slots_(options.buffer_count),
        pipeline_write_(options.pipeline_write),
        read_ahead_(TileReadAhead(options)),
        hooks_(hooks),
        storing_(static_cast<size_t>(options.buffer_count), -1) {}

  Status Run() {
    for (int64_t tile = 0; tile < num_tiles_; ++tile) {
      // The tile itself, then the tiles the ring may read ahead.
      const int64_t last = std::min(num_tiles_ - 1, tile + read_ahead_);
      while (next_fetch_ <= last) {
        if (Status status = BeginFetch(next_fetch_); !status.ok()) return Abort(std::move(status));
      }
      const int slot = Slot(tile);
      Status status = hooks_.finish_fetch(tile, slot);
      finished_fetch_ = tile + 1;
      if (status.ok()) status = hooks_.compute(tile, slot);
      if (status.ok()) status = hooks_.begin_store(tile, slot);
      if (!status.ok()) return Abort(std::move(status));
      storing_[slot] = tile;
      if (!pipeline_write_) {
        if (Status stored = FinishStore(slot); !stored.ok()) return Abort(std::move(stored));
      }
    }
    // The last stores, in tile order (so the first failing tile is the one reported).
    for (int64_t tile = std::max<int64_t>(0, num_tiles_ - slots_); tile < num_tiles_; ++tile) {
      if (Status stored = FinishStore(Slot(tile), /*last=*/true); !stored.ok()) {
        return Abort(std::move(stored));
      }
    }
    return OkStatus();
  }

 private:
  int Slot(int64_t tile) const { return static_cast<int>(tile % slots_); }

  Status FinishStore(int slot, bool last = false) {
    const int64_t tile = storing_[slot];
    if (tile < 0) return OkStatus();
    storing_[slot] = -1;
    return last && hooks_.detach_store ? hooks_.detach_store(tile, slot)
                                       : hooks_.finish_store(tile, slot);
  }

  Status BeginFetch(int64_t tile) {
    const int slot = Slot(tile);
    SLUICE_RETURN_IF_ERROR(FinishStore(slot));  // the slot's previous tile must be out first
    Status status = hooks_.begin_fetch(tile, slot);
    // A failed begin may still have started part of its transfers: finish_fetch settles them.
    ++next_fetch_;
    return status;
  }

  // Settles everything in flight so that no transfer outlives the step, keeping the first error.
  Status Abort(Status first) {
    for (int64_t tile = finished_fetch_; tile < next_fetch_; ++tile) {
      Status status = hooks_.finish_fetch(tile, Slot(tile));
      if (!status.ok()) {
        SLUICE_LOG(kWarn, "offload", "after an earlier error, tile {}: {}", tile,
                   status.ToString());
      }
    }
    finished_fetch_ = next_fetch_;
    std::vector<int64_t> stores;
    for (int64_t tile : storing_) {
      if (tile >= 0) stores.push_back(tile);
    }
    std::sort(stores.begin(), stores.end());
    for (int64_t tile : stores) {
      Status status = FinishStore(Slot(tile));
      if (!status.ok()) {
        SLUICE_LOG(kWarn, "offload", "after an earlier error: {}", status.ToString());
      }
    }
    return first;
  }

  const int64_t num_tiles_;
  const int slots_;
  const bool pipeline_write_;
  const int read_ahead_;
  const TilePipelineHooks& hooks_;
  std::vector<int64_t> storing_;  // per slot: the tile whose store is in flight, or -1
  int64_t next_fetch_ = 0;        // tiles [0, next_fetch_) have begun fetching
  int64_t finished_fetch_ = 0;    // tiles [0, finished_fetch_) have finished fetching
};

}  // namespace

Status RunTilePipeline(int64_t num_tiles, const TilePipelineOptions& options,
                       const TilePipelineHooks& hooks) {
  SLUICE_CHECK_GE(options.buffer_count, 1);
  SLUICE_CHECK_GE(num_tiles, 0);
  return TileRing(num_tiles, options, hooks).Run();
}

}  // namespace sluice::offload
