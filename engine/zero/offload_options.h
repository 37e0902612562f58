// How the offloaded optimizer (offloaded_adam.h) keeps and streams its state: the tier that holds
// fp32 master weights, exp_avg and exp_avg_sq (host memory or NVMe), the tile the step works in
// (DeepSpeed's sub_group_size), and the pinned staging ring between the tiers
// (offload_optimizer.buffer_count, pipeline_read, pipeline_write).
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/config.h"
#include "offload/aio_engine.h"
#include "runtime/status.h"

namespace sluice::offload {
class AioEngine;
class SwapStore;
}  // namespace sluice::offload

namespace sluice::zero {

class NvmeParamStore;

enum class OptimizerStateTier { kHost, kNvme };
std::string_view OptimizerStateTierName(OptimizerStateTier tier);  // "cpu", "nvme"

// Tiles are whole multiples of this many elements (the last one excepted), so that every region
// of a staging slot (fp32 state, 2-byte gradients, 2-byte parameters) is a whole number of 4 KiB
// pages, as O_DIRECT and DMA want.
inline constexpr int64_t kOffloadTileQuantum = 2048;
// The tile used when sub_group_size is larger (DeepSpeed's default is 1e9 elements): 1 Mi
// elements = 12 MiB of fp32 state per NVMe request (a dozen aio blocks, enough to fill the
// queue), a pinned ring of 4 slots = 72 MiB with bf16 gradients and parameters, and a few
// milliseconds of Adam per tile, so pipeline fill and drain cost ~1/tiles of a step.
inline constexpr int64_t kDefaultOffloadTileElements = int64_t{1} << 20;

struct OffloadedAdamOptions {
  OptimizerStateTier tier = OptimizerStateTier::kHost;
  // Elements per tile: a positive multiple of kOffloadTileQuantum.
  int64_t tile_elements = kDefaultOffloadTileElements;
  // offload_optimizer.buffer_count: pinned staging slots, each holding one tile. Reading tile
  // g+1, updating g and writing g-1 at once needs 3; more slots read further ahead.
  int buffer_count = 4;
  // offload_optimizer.pipeline_read: read (NVMe) and copy (device-to-host) the next tiles'
  // inputs while the current tile is updated; off: only after it was written back.
  bool pipeline_read = true;
  // offload_optimizer.pipeline_write: let a tile's NVMe write and host-to-device copy run while
  // the next tiles are updated; off: wait for them before the next tile starts.
  bool pipeline_write = true;
  // Host tier: -1 places each page where the Adam thread that updates it first touches it (the
  // kernel's static partition); >= 0 binds the state to that NUMA node (hwloc os index).
  int numa_node = -1;
  // NVMe tier: the swap store the tiles live in (one extent per tile). Borrowed: it must outlive
  // the optimizer.
  offload::SwapStore* swap_store = nullptr;
  // NVMe tier, optional: the swap store's I/O engine, to register the staging ring as io_uring
  // fixed buffers (no per-request page pinning; best effort). Borrowed, like swap_store.
  offload::AioEngine* aio_engine = nullptr;
  // Step's gradients are host memory (the ZeRO engine's offloaded fp32 gradient shard): the
  // kernel reads each tile in place and no device-to-host copy is made.
  bool host_gradients = false;
  // The parameter shard is host memory (offload_param): updated tiles are copied host-to-host.
  bool host_params = false;
  // offload_param nvme: updated parameter tiles are written back to this store (in shard order,
  // each step), and the parameter shard pointer is unused (null). Borrowed.
  NvmeParamStore* param_store = nullptr;
};

// The offloaded optimizer's tile for zero_optimization.sub_group_size: rounded down to a multiple
// of kOffloadTileQuantum, at most kDefaultOffloadTileElements (0 when sub_group_size is smaller
// than one quantum).
int64_t OffloadTileElements(int64_t sub_group_size);
// The same, InvalidArgument naming zero_optimization.sub_group_size when it is below one quantum.
Result<int64_t> CheckedOffloadTileElements(int64_t sub_group_size);

// From zero_optimization.sub_group_size and zero_optimization.offload_optimizer.*: the tile is
// sub_group_size rounded down to a multiple of kOffloadTileQuantum, at most
// kDefaultOffloadTileElements. `swap_store` (and its engine) are required when
// offload_optimizer.device is nvme. InvalidArgument when offload_optimizer.device is none.
Result<OffloadedAdamOptions> OffloadedAdamOptionsFromConfig(
    const ZeroConfig& zero, offload::SwapStore* swap_store,
    offload::AioEngine* aio_engine = nullptr);

// The I/O engine options of the aio.* section (both NVMe tiers use one each).
offload::AioOptions AioOptionsOf(const AioConfig& aio);

// OK, or InvalidArgument naming the config key at fault and what to change.
Status ValidateOffloadedAdamOptions(const OffloadedAdamOptions& options);

}  // namespace sluice::zero
