// How the offloaded optimizer (offloaded_adam.h) keeps and streams its state: the tier that holds
// fp32 master weights, exp_avg and exp_avg_sq (host memory or NVMe), the tile the step works in,
// and the pinned staging ring between the tiers. The engine fills these from its configuration
// (engine/zero/offload_options.h: zero_optimization.sub_group_size and offload_optimizer.*,
// whose keys the messages below name so that a refusal says what to change).
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace sluice::offload {

class AioEngine;
class NvmeParamStore;
class PinnedStagingBudget;
class SwapStore;

enum class OptimizerStateTier { kHost, kNvme };
std::string_view OptimizerStateTierName(OptimizerStateTier tier);  // "cpu", "nvme"

// Tiles are whole multiples of this many elements (the last one excepted), so that every region
// of a staging slot (fp32 state, 2-byte gradients, 2-byte parameters) is a whole number of 4 KiB
// pages, as O_DIRECT and DMA want.
inline constexpr int64_t kOffloadTileQuantum = 2048;
// The tile used when a larger one is asked for (DeepSpeed's sub_group_size default is 1e9
// elements): 1 Mi elements = 12 MiB of fp32 state per NVMe request (a dozen aio blocks, enough
// to fill the queue), a pinned ring of 4 slots = 72 MiB with bf16 gradients and parameters, and
// a few milliseconds of Adam per tile, so pipeline fill and drain cost ~1/tiles of a step.
inline constexpr int64_t kDefaultOffloadTileElements = int64_t{1} << 20;

struct OffloadedAdamOptions {
  OptimizerStateTier tier = OptimizerStateTier::kHost;
  // Elements per tile: a positive multiple of kOffloadTileQuantum.
  int64_t tile_elements = kDefaultOffloadTileElements;
  // Pinned staging slots, each holding one tile. Reading tile g+1, updating g and writing g-1 at
  // once needs 3; more slots read further ahead.
  int buffer_count = 4;
  // Read (NVMe) and copy (device-to-host) the next tiles' inputs while the current tile is
  // updated; off: only after it was written back.
  bool pipeline_read = true;
  // Let a tile's NVMe write and host-to-device copy run while the next tiles are updated; off:
  // wait for them before the next tile starts.
  bool pipeline_write = true;
  // Host tier: -1 places each page where the Adam thread that updates it first touches it (the
  // kernel's static partition); >= 0 binds the state to that NUMA node (hwloc os index).
  int numa_node = -1;
  // NVMe tier: the swap store the tiles live in (one extent per tile). Borrowed: it must outlive
  // the optimizer.
  SwapStore* swap_store = nullptr;
  // NVMe tier, optional: the swap store's I/O engine, to register the staging ring as io_uring
  // fixed buffers (no per-request page pinning; best effort). Borrowed, like swap_store.
  AioEngine* aio_engine = nullptr;
  // Optional: the rank's pinned staging budget (rank_tiers.h) the ring is reserved from.
  // Borrowed, like swap_store.
  PinnedStagingBudget* staging_budget = nullptr;
  // Step's gradients are host memory (the ZeRO engine's offloaded fp32 gradient shard): the
  // kernel reads each tile in place and no device-to-host copy is made.
  bool host_gradients = false;
  // The parameter shard is host memory: updated tiles are copied host-to-host.
  bool host_params = false;
  // Parameters on NVMe: updated parameter tiles are written back to this store (in shard order,
  // each step), and the parameter shard pointer is unused (null). Borrowed.
  NvmeParamStore* param_store = nullptr;
};

// OK, or InvalidArgument naming the setting at fault and what to change.
Status ValidateOffloadedAdamOptions(const OffloadedAdamOptions& options);

}  // namespace sluice::offload
