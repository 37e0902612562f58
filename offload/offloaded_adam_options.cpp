#include "offload/offloaded_adam_options.h"

namespace sluice::offload {

std::string_view OptimizerStateTierName(OptimizerStateTier tier) {
  return tier == OptimizerStateTier::kNvme ? "nvme" : "cpu";
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

}  // namespace sluice::offload
