// The schedule of the offloaded optimizer step over tiles, through a ring of `buffer_count`
// staging slots (tile g uses slot g mod buffer_count): fetch tile g+1 (NVMe read, gradient
// device-to-host copy) while tile g is updated and tile g-1 is stored (NVMe write, parameter
// host-to-device copy). The caller's thread runs the updates; the transfers are asynchronous
// (io_uring, device streams), so one thread drives the whole ring and every wait is in tile
// order, which keeps the step deterministic.
//
// With pipeline_read a slot's fetch is issued up to TileReadAhead() tiles ahead of the update;
// without it, only after the previous tile was updated (and, without pipeline_write, stored).
// With pipeline_write a store is waited for only when its slot is needed again (or at the end,
// unless the caller takes the last stores with detach_store); without it, right after it was
// issued. A slot is reused only once its store finished.
#pragma once

#include <cstdint>
#include <functional>

#include "runtime/status.h"

namespace sluice::offload {

// A flat range of `count` elements cut into tiles of `tile_elements` (the last may be shorter).
struct TileGrid {
  int64_t count = 0;
  int64_t tile_elements = 1;

  int64_t num_tiles() const { return count == 0 ? 0 : (count + tile_elements - 1) / tile_elements; }
  int64_t begin(int64_t tile) const { return tile * tile_elements; }
  int64_t length(int64_t tile) const {
    const int64_t rest = count - begin(tile);
    return rest < tile_elements ? rest : tile_elements;
  }
  // The longest tile: what one staging slot must hold.
  int64_t max_length() const { return count < tile_elements ? count : tile_elements; }
};

struct TilePipelineOptions {
  int buffer_count = 4;
  bool pipeline_read = true;
  bool pipeline_write = true;
};

// How many tiles past the one being updated may be fetching: 0 without pipeline_read or with a
// single slot; else buffer_count - 1, less one slot left for the store in flight with
// pipeline_write (at least 1).
int TileReadAhead(const TilePipelineOptions& options);

// Each hook gets the tile and its slot and returns OK or the error, which ends the step.
struct TilePipelineHooks {
  std::function<Status(int64_t tile, int slot)> begin_fetch;   // start moving inputs into slot
  std::function<Status(int64_t tile, int slot)> finish_fetch;  // block until they are there
  std::function<Status(int64_t tile, int slot)> compute;       // update the tile in its slot
  std::function<Status(int64_t tile, int slot)> begin_store;   // start moving results out
  std::function<Status(int64_t tile, int slot)> finish_store;  // block until the slot is free
  // Optional: for the stores still in flight when the last tile is stored, called instead of
  // finish_store; it finishes what the run must (the parameter copies) and leaves the rest (the
  // NVMe writes) in flight, for the caller to settle before it reuses the slot.
  std::function<Status(int64_t tile, int slot)> detach_store;
};

// Runs tiles 0..num_tiles-1 through the hooks. On the first error it stops issuing work, waits
// for every fetch and store already begun (their own errors are logged, not returned), and
// returns the first error: when it returns, no transfer into or out of a slot is in flight.
Status RunTilePipeline(int64_t num_tiles, const TilePipelineOptions& options,
                       const TilePipelineHooks& hooks);

}  // namespace sluice::offload
