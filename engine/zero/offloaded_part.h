// An OffloadedAdam together with what it borrows: on nvme its own I/O engine and swap store. The
// fully offloaded optimizer (zero_optimizer.cpp), the offloaded part of a split
// (split_optimizer.h) and the ratio probe (offload_ratio.h) are all made here.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/zero/offloaded_adam.h"
#include "engine/zero/zero_optimizer.h"
#include "engine/zero/zero_options.h"
#include "offload/aio_engine.h"
#include "offload/swap_store.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::zero {

// Member order is destruction order reversed: the optimizer goes first, then its store, then the
// store's engine.
struct OffloadedPart {
  std::unique_ptr<offload::AioEngine> aio;
  std::unique_ptr<offload::SwapStore> store;
  std::unique_ptr<OffloadedAdam> adam;
};

// OffloadedAdam over `count` elements of the parameter shard `params`, configured by
// options.offload_optimizer, sub_group_size and aio. Step's gradients are fp32 in host memory
// with `host_gradients` (read in place), else device memory (each tile copied off by the
// optimizer). On nvme the swap file is "<file_stem>.rank<rank>.swp" in
// offload_optimizer.nvme_path, removed when closed.
Result<OffloadedPart> CreateOffloadedPart(Device& device, const ZeroOptions& options,
                                          const ParamShardTarget& params, bool host_gradients,
                                          int64_t count, int rank, std::string_view file_stem);

}  // namespace sluice::zero
