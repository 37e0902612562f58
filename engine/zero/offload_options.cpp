#include "engine/zero/offload_options.h"

#include <algorithm>

#include "runtime/logging.h"

namespace sluice::zero {

std::string_view OptimizerStateTierName(OptimizerStateTier tier) {
  return tier == OptimizerStateTier::kNvme ? "nvme" : "cpu";
}

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

Result<OffloadedAdamOptions> OffloadedAdamOptionsFromConfig(const ZeroConfig& zero,
                                                            offload::SwapStore* swap_store,
                                                            offload::AioEngine* aio_engine) {
  const OffloadOptimizerConfig& c = zero.offload_optimizer;
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
  SLUICE_ASSIGN_OR_RETURN(options.tile_elements, CheckedOffloadTileElements(zero.sub_group_size));
  if (options.tile_elements != zero.sub_group_size) {
    SLUICE_LOG_ONCE(kInfo, "offload",
                    "zero_optimization.sub_group_size {} gives optimizer tiles of {} elements "
                    "(multiples of {}, at most {})",
                    zero.sub_group_size, options.tile_elements, kOffloadTileQuantum,
                    kDefaultOffloadTileElements);
  }
  options.buffer_count = c.buffer_count;
  options.pipeline_read = c.pipeline_read;
  options.pipeline_write = c.pipeline_write;
  options.swap_store = swap_store;
  options.aio_engine = aio_engine;
  SLUICE_RETURN_IF_ERROR(ValidateOffloadedAdamOptions(options));
  return options;
}

Status ValidateOffloadedAdamOptions(const OffloadedAdamOptions& options) {
  if (options.tile_elements <= 0 || options.tile_elements % kOffloadTileQuantum != 0) {
    return InvalidArgumentError(
        "optimizer tile of {} elements (zero_optimization.sub_group_size) must be a positive "
        "multiple of {}",
        options.tile_elements, kOffloadTileQuantum);
  }
  if (options.buffer_count < 1 || options.buffer_count > 64) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.buffer_count must be in [1, 64], got {} (3 lets "
        "read, update and write overlap; 4 is the default)",
        options.buffer_count);
  }
  if (options.tier == OptimizerStateTier::kNvme && options.swap_store == nullptr) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.device is nvme but no swap store was given (set "
        "zero_optimization.offload_optimizer.nvme_path)");
  }
  if (options.numa_node < -1) {
    return InvalidArgumentError(
        "optimizer state NUMA node must be -1 (first touch) or >= 0, got {}", options.numa_node);
  }
  return OkStatus();
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

}  // namespace sluice::zero
