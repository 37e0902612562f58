#include "engine/zero/offloaded_part.h"

#include <fmt/format.h>

namespace sluice::zero {

Result<OffloadedPart> CreateOffloadedPart(Device& device, const ZeroOptions& options,
                                          const ParamShardTarget& params, bool host_gradients,
                                          int64_t count, int rank, std::string_view file_stem) {
  const OffloadOptimizerConfig& offload = options.offload_optimizer;
  OffloadedPart part;
  if (offload.device == OffloadDevice::kNvme) {
    Result<std::unique_ptr<offload::AioEngine>> aio =
        offload::AioEngine::Create(AioOptionsOf(options.aio));
    if (!aio.ok()) {
      return Status(aio.status())
          .WithContext("creating the I/O engine of zero_optimization.offload_optimizer (aio.*)");
    }
    part.aio = std::move(aio).value();
    offload::SwapStoreOptions store;
    store.paths = {offload.nvme_path};
    store.rank = rank;
    store.file_name = fmt::format("{}.rank{}.swp", file_stem, rank);
    store.remove_on_close = true;  // scratch: the state that matters goes into checkpoints
    Result<std::unique_ptr<offload::SwapStore>> created =
        offload::SwapStore::Create(*part.aio, store);
    if (!created.ok()) {
      return Status(created.status())
          .WithContext(fmt::format(
              "creating the optimizer swap store in zero_optimization.offload_optimizer.nvme_path "
              "= {}",
              offload.nvme_path));
    }
    part.store = std::move(created).value();
  }
  ZeroConfig zero;
  zero.offload_optimizer = offload;
  zero.sub_group_size = options.sub_group_size;
  SLUICE_ASSIGN_OR_RETURN(OffloadedAdamOptions adam_options,
                          OffloadedAdamOptionsFromConfig(zero, part.store.get(), part.aio.get()));
  adam_options.host_gradients = host_gradients;
  adam_options.host_params = params.host;
  adam_options.param_store = params.nvme;
  SLUICE_ASSIGN_OR_RETURN(
      part.adam, OffloadedAdam::Create(device, options.optimizer, options.param_dtype, params.shard,
                                       DType::kF32, count, options.num_threads, adam_options));
  return part;
}

}  // namespace sluice::zero
