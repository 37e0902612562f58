// The engine's side of the offload tiers (offload/): the placement policy's one translation of
// its configuration into offload's own option structs. offload/ never sees a config struct, a
// ZeRO stage or a ShardLayout; these functions are where zero_optimization.sub_group_size,
// offload_optimizer.*, offload_param.*, aio.* and the optimizer section become
// offload::OffloadedAdamOptions, offload::NvmeParamStoreOptions, offload::CpuOptimizer and
// offload::RankTiersOptions.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/zero/zero_sections.h"
#include "engine/model/parameter_registry.h"
#include "engine/zero/shard_layout.h"
#include "offload/aio_options.h"
#include "offload/cpu_optimizer.h"
#include "offload/nvme_param_store.h"
#include "offload/offloaded_adam_options.h"
#include "offload/rank_tiers.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::zero {

// The offloaded optimizer's tile for zero_optimization.sub_group_size: rounded down to a multiple
// of offload::kOffloadTileQuantum, at most offload::kDefaultOffloadTileElements (0 when
// sub_group_size is smaller than one quantum).
int64_t OffloadTileElements(int64_t sub_group_size);
// The same, InvalidArgument naming zero_optimization.sub_group_size when it is below one quantum.
Result<int64_t> CheckedOffloadTileElements(int64_t sub_group_size);

// From zero_optimization.offload_optimizer.* and zero_optimization.sub_group_size: the tile is
// sub_group_size rounded down to a multiple of kOffloadTileQuantum, at most
// kDefaultOffloadTileElements. `swap_store` (and its engine) are required when
// offload_optimizer.device is nvme. InvalidArgument when offload_optimizer.device is none.
Result<offload::OffloadedAdamOptions> OffloadedAdamOptionsOf(
    const OffloadOptimizerConfig& offload_optimizer, int64_t sub_group_size,
    offload::SwapStore* swap_store, offload::AioEngine* aio_engine = nullptr);

// The CPU optimizer of the optimizer section (Adam / AdamW, or Lion): its kind, name and
// hyperparameters. (Lamb, which the offloaded optimizer refuses, maps to Adam's kernel.)
offload::CpuOptimizer CpuOptimizerOf(const OptimizerConfig& config);

// The I/O engine options of the aio.* section (the rank's one engine serves both NVMe tiers).
offload::AioOptions AioOptionsOf(const AioConfig& aio);

// The rank's tiers: aio.* for its one I/O engine; no pinned staging limit (each staging is
// bounded by its own buffer_count and size settings).
offload::RankTiersOptions RankTiersOptionsOf(const AioConfig& aio, int rank);

// From zero_optimization.offload_param.* (nvme_path, buffer_count, buffer_size, max_in_cpu) and
// the parameter dtype.
offload::NvmeParamStoreOptions NvmeParamStoreOptionsOf(const OffloadParamConfig& config,
                                                       DType dtype, int rank);

// The NVMe parameter store's groups: one per unit with non-persistent parameters (registry order,
// extent "params.<i>", what one all-gather sends), then the persistent run ("params.persistent").
std::vector<offload::NvmeParamGroup> NvmeParamGroupsOf(const ShardLayout& layout,
                                                       const model::ParameterRegistry& registry);

}  // namespace sluice::zero
