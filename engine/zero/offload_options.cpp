#include "engine/zero/offload_options.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/logging.h"

namespace sluice::zero {

using offload::kDefaultOffloadTileElements;
using offload::kOffloadTileQuantum;
using offload::OffloadedAdamOptions;
using offload::OptimizerStateTier;

int64_t OffloadTileElements(int64_t sub_group_size) {
  return std::min(sub_group_size / kOffloadTileQuantum * kOffloadTileQuantum,
                  kDefaultOffloadTileElements);
}

Result<int64_t> CheckedOffloadTileElements(int64_t sub_group_size) {
  if (sub_group_size < kOffloadTileQuantum) {
    return InvalidArgumentError(
        "zero_optimization.sub_group_size is {} elements; the offloaded optimizer's tiles (also "
        "the unit of zero_optimization.offload_optimizer.ratio) need at least {}",
        sub_group_size, kOffloadTileQuantum);
  }
  return OffloadTileElements(sub_group_size);
}

Result<OffloadedAdamOptions> OffloadedAdamOptionsOf(const OffloadOptimizerConfig& c,
                                                    int64_t sub_group_size,
                                                    offload::SwapStore* swap_store,
                                                    offload::AioEngine* aio_engine) {
  OffloadedAdamOptions options;
  switch (c.device) {
    case OffloadDevice::kNone:
      return InvalidArgumentError(
          "zero_optimization.offload_optimizer.device is none: the offloaded optimizer needs cpu "
          "or nvme");
    case OffloadDevice::kCpu:
      options.tier = OptimizerStateTier::kHost;
      break;
    case OffloadDevice::kNvme:
      options.tier = OptimizerStateTier::kNvme;
      break;
  }
  SLUICE_ASSIGN_OR_RETURN(options.tile_elements, CheckedOffloadTileElements(sub_group_size));
  if (options.tile_elements != sub_group_size) {
    SLUICE_LOG_ONCE(kInfo, "offload",
                    "zero_optimization.sub_group_size {} gives optimizer tiles of {} elements "
                    "(multiples of {}, at most {})",
                    sub_group_size, options.tile_elements, kOffloadTileQuantum,
                    kDefaultOffloadTileElements);
  }
  options.buffer_count = c.buffer_count;
  options.pipeline_read = c.pipeline_read;
  options.pipeline_write = c.pipeline_write;
  options.swap_store = swap_store;
  options.aio_engine = aio_engine;
  SLUICE_RETURN_IF_ERROR(offload::ValidateOffloadedAdamOptions(options));
  return options;
}

offload::AioOptions AioOptionsOf(const AioConfig& aio) {
  offload::AioOptions options;
  options.block_size = static_cast<uint64_t>(aio.block_size);
  options.queue_depth = aio.queue_depth;
  options.intra_op_parallelism = aio.intra_op_parallelism;
  options.single_submit = aio.single_submit;
  options.overlap_events = aio.overlap_events;
  return options;
}

offload::CpuOptimizer CpuOptimizerOf(const OptimizerConfig& config) {
  offload::CpuOptimizer optimizer;
  optimizer.kind = config.type == OptimizerType::kLion ? offload::CpuOptimizerKind::kLion
                                                       : offload::CpuOptimizerKind::kAdam;
  optimizer.name = std::string(OptimizerTypeName(config.type));
  optimizer.adam_w_mode = config.adam_w_mode;
  optimizer.beta1 = config.beta1;
  optimizer.beta2 = config.beta2;
  optimizer.eps = config.eps;
  optimizer.weight_decay = config.weight_decay;
  optimizer.bias_correction = config.bias_correction;
  return optimizer;
}

offload::RankTiersOptions RankTiersOptionsOf(const AioConfig& aio, int rank) {
  offload::RankTiersOptions options;
  options.rank = rank;
  options.aio = AioOptionsOf(aio);
  return options;
}

offload::NvmeParamStoreOptions NvmeParamStoreOptionsOf(const OffloadParamConfig& config,
                                                       DType dtype, int rank) {
  offload::NvmeParamStoreOptions options;
  options.nvme_path = config.nvme_path;
  options.rank = rank;
  options.dtype = dtype;
  options.buffer_count = config.buffer_count;
  options.buffer_size = config.buffer_size;
  options.max_in_cpu = config.max_in_cpu;
  return options;
}

std::vector<offload::NvmeParamGroup> NvmeParamGroupsOf(const ShardLayout& layout,
                                                       const model::ParameterRegistry& registry) {
  std::vector<offload::NvmeParamGroup> groups;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const UnitShards& shards = layout.units()[u];
    if (shards.gathered_numel == 0) continue;
    groups.push_back({.what = fmt::format("the parameters of {}", registry.units()[u].name),
                      .extent = fmt::format("params.{}", groups.size()),
                      .shard_offset = shards.gather_offset,
                      .elements = shards.gather_elements});
  }
  if (layout.persistent_elements() > 0) {
    groups.push_back({.what = "the persistent parameters",
                      .extent = "params.persistent",
                      .shard_offset = layout.persistent_offset(),
                      .elements = layout.persistent_elements()});
  }
  return groups;
}

}  // namespace sluice::zero
