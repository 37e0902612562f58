// Budgets are hard: before the trainer allocates anything, the estimate of what the config
// needs on each tier (memory_estimate.h) is checked against the device, host and NVMe budgets
// (estimate_fit.h), and a config that cannot fit is refused with the tier, the bytes needed and
// available, and the settings to change (the estimator's alternatives that do fit, when any).
#pragma once

#include "engine/config/config.h"
#include "runtime/status.h"

namespace sluice::estimate {

// OK when every checked budget holds for `world_size` data-parallel ranks (config.dp_world_size),
// each of them config.parallel.tensor tensor ranks holding their pieces of the model
// (memory_estimate.h); ResourceExhausted otherwise, e.g.
//   "the device budget is exceeded: 812.0 MiB (851443712 bytes) needed per rank, 64.0 MiB
//    (67108864 bytes) available (device.memory_limit); change device.memory_limit, or one of:
//    zero_optimization.stage: 3 (fits: ...)".
Status CheckBudgetsBeforeAllocating(const Config& config, int world_size);

}  // namespace sluice::estimate
