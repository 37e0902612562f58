#include "offload/nvme_state_store.h"

#include <fmt/format.h>

#include "offload/aligned_buffer.h"
#include "runtime/logging.h"

namespace sluice::offload {

std::string NvmeStateStore::ExtentName(int64_t tile) {
  return fmt::format("subgroup{}.adam_state", tile);
}

uint64_t NvmeStateStore::TileBytes(int64_t tile) const {
  return static_cast<uint64_t>(grid_.length(tile)) * static_cast<uint64_t>(tensors_) *
         sizeof(float);
}

Result<std::unique_ptr<NvmeStateStore>> NvmeStateStore::Create(SwapStore& store,
                                                               const TileGrid& grid, int moments) {
  if (moments != 1 && moments != 2) {
    return InvalidArgumentError("optimizer state with {} moment tensors (1 or 2)", moments);
  }
  std::unique_ptr<NvmeStateStore> state(new NvmeStateStore(store, grid, moments));
  const int64_t tiles = grid.num_tiles();
  // The final size is known: one preallocation of exactly that (what the memory estimate counts,
  // SwapStoreDiskBytes) rather than growth tile by tile. When the filesystem cannot take
  // it, the tiles are placed one by one anyway, so that the error names the first that does not
  // fit.
  uint64_t needed = 0;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    needed += AlignUp(state->TileBytes(tile), kIoAlignment);
  }
  if (Status room = store.EnsureRoom(needed); !room.ok()) {
    SLUICE_LOG(kDebug, "offload",
               "no room for the optimizer state in one piece ({}); placing it tile by tile",
               room.message());
  }
  uint64_t capacity = 0;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    Result<SwapExtent> extent = store.Allocate(ExtentName(tile), state->TileBytes(tile));
    if (!extent.ok()) {
      // `state` going out of scope frees the extents of tiles [0, tile) again.
      return Status(extent.status())
          .WithContext(fmt::format(
              "placing the optimizer state of tile {} of {} (elements [{}, {})) on NVMe", tile,
              tiles, grid.begin(tile), grid.begin(tile) + grid.length(tile)));
    }
    capacity += extent->capacity;
    state->allocated_ = tile + 1;
  }
  state->charge_ = MemoryCharge(MemoryTier::kNvme, MemoryCategory::kOptimizer, capacity);
  return state;
}

NvmeStateStore::~NvmeStateStore() {
  for (int64_t tile = 0; tile < allocated_; ++tile) {
    Status status = store_.Free(ExtentName(tile));
    if (!status.ok()) {
      SLUICE_LOG(kWarn, "offload", "freeing the optimizer state of tile {}: {}", tile,
                 status.ToString());
    }
  }
}

SwapHandle NvmeStateStore::ReadAsync(int64_t tile, void* staging) {
  return store_.ReadAsync(ExtentName(tile), staging, TileBytes(tile));
}

SwapHandle NvmeStateStore::WriteAsync(int64_t tile, const void* staging) {
  return store_.WriteAsync(ExtentName(tile), staging, TileBytes(tile));
}

}  // namespace sluice::offload
