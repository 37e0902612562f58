// The NVMe tier of the offloaded optimizer: one swap-store extent per tile holding that tile's
// fp32 p | m | v back to back (Lion: p | m; named "subgroup{g}.adam_state"), read into and written
// from a staging slot in one request each. One extent per tile rather than per tensor: each
// request is 12 bytes per element (Lion: 8; 12 MiB for a 1 Mi-element tile, a dozen aio blocks, so
// a single request keeps the queue full), one checksum is verified per tile, a short last tile pads
// one 4 KiB block instead of three, and the 4096-record extent table holds 4096 tiles instead of
// 1365. The extents are allocated when the store is created, after growing the swap store once to
// their total (a full disk is found before training, not in a step, and the store takes what
// the memory estimate counts), and freed when it is destroyed; they are charged to the ledger as
// nvme.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offload/swap_store.h"
#include "offload/tile_pipeline.h"
#include "runtime/memory_accounting.h"
#include "runtime/status.h"

namespace sluice::offload {

class NvmeStateStore {
 public:
  // Allocates every tile's extent. On failure (ResourceExhausted for a full filesystem or a file
  // size limit) the error names the tile, and the extents already allocated are freed again: the
  // store is left as it was.
  // `moments`: 2 for Adam's m and v, 1 for Lion's m.
  static Result<std::unique_ptr<NvmeStateStore>> Create(SwapStore& store, const TileGrid& grid,
                                                        int moments = 2);
  ~NvmeStateStore();  // frees the extents (errors are logged)
  NvmeStateStore(const NvmeStateStore&) = delete;
  NvmeStateStore& operator=(const NvmeStateStore&) = delete;

  static std::string ExtentName(int64_t tile);
  // Bytes of one tile's extent data: 12 per element (Lion: 8).
  uint64_t TileBytes(int64_t tile) const;

  // `staging` is 4 KiB-aligned with room for AlignUp(TileBytes(tile), 4 KiB) bytes.
  SwapHandle ReadAsync(int64_t tile, void* staging);
  SwapHandle WriteAsync(int64_t tile, const void* staging);

  SwapStore& swap_store() const { return store_; }
  uint64_t bytes() const { return charge_.bytes(); }  // extent capacity, all tiles

 private:
  NvmeStateStore(SwapStore& store, const TileGrid& grid, int moments)
      : store_(store), grid_(grid), tensors_(1 + moments) {}

  SwapStore& store_;
  TileGrid grid_;
  int tensors_ = 3;        // fp32 values per element: the master weights and the moments
  int64_t allocated_ = 0;  // tiles [0, allocated_) have an extent
  MemoryCharge charge_;
};

}  // namespace sluice::offload
