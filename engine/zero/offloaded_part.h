// An offload::OffloadedAdam together with what it borrows: on nvme a swap store of its own on the
// rank's I/O engine (offload::RankTiers). The fully offloaded optimizer (zero_optimizer.cpp), the
// offloaded part of a split (split_optimizer.h) and the ratio probe (offload_ratio.h) are all
// made here.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/zero/zero_optimizer.h"
#include "engine/zero/zero_options.h"
#include "offload/offloaded_adam.h"
#include "offload/rank_tiers.h"
#include "offload/swap_store.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::zero {

// Member order is destruction order reversed: the optimizer goes first, then its store (the
// store's engine is the rank's, in the RankTiers it was made with).
struct OffloadedPart {
  std::unique_ptr<offload::SwapStore> store;
  std::unique_ptr<offload::OffloadedAdam> adam;
};

// OffloadedAdam over `count` elements of the parameter shard `params`, configured by
// options.offload_optimizer, sub_group_size and the optimizer section, its staging ring reserved
// from `tiers`' budget. Step's gradients are fp32 in host memory with `host_gradients` (read in
// place), else device memory (each tile copied off by the optimizer). On nvme the swap file is
// "<file_stem>.rank<rank>.swp" in offload_optimizer.nvme_path, on `tiers`' I/O engine, removed
// when closed. `tiers` must outlive the part.
Result<OffloadedPart> CreateOffloadedPart(Device& device, const ZeroOptions& options,
                                          const ParamShardTarget& params, bool host_gradients,
                                          int64_t count, offload::RankTiers& tiers,
                                          std::string_view file_stem);

}  // namespace sluice::zero
