#include "engine/zero/offloaded_part.h"

#include <fmt/format.h>

#include "engine/zero/offload_options.h"

namespace sluice::zero {

Result<OffloadedPart> CreateOffloadedPart(Device& device, const ZeroOptions& options,
                                          const ParamShardTarget& params, bool host_gradients,
                                          int64_t count, offload::RankTiers& tiers,
                                          std::string_view file_stem) {
  const OffloadOptimizerConfig& config = options.offload_optimizer;
  OffloadedPart part;
  offload::AioEngine* aio = nullptr;
  if (config.device == OffloadDevice::kNvme) {
    offload::SwapStoreOptions store;
    store.paths = {config.nvme_path};
    store.rank = tiers.rank();
    store.file_name = fmt::format("{}.rank{}.swp", file_stem, tiers.rank());
    store.remove_on_close = true;  // scratch: the state that matters goes into checkpoints
    SLUICE_ASSIGN_OR_RETURN(
        part.store,
        tiers.OpenSwapStore(store, fmt::format("the optimizer swap store in "
                                               "zero_optimization.offload_optimizer.nvme_path = {}",
                                               config.nvme_path)));
    aio = tiers.aio_if_created();
  }
  SLUICE_ASSIGN_OR_RETURN(
      offload::OffloadedAdamOptions adam_options,
      OffloadedAdamOptionsOf(config, options.sub_group_size, part.store.get(), aio));
  adam_options.staging_budget = &tiers.staging_budget();
  adam_options.host_gradients = host_gradients;
  adam_options.host_params = params.host;
  adam_options.param_store = params.nvme;
  SLUICE_ASSIGN_OR_RETURN(
      part.adam, offload::OffloadedAdam::Create(device, CpuOptimizerOf(options.optimizer),
                                                options.param_dtype, params.shard, DType::kF32,
                                                count, options.num_threads, adam_options));
  return part;
}

}  // namespace sluice::zero
