// The CPU optimizer kernels' hyperparameters from the optimizer section (Adam's or Lion's), for
// the optimizers on the device (ShardedAdam) and the config checks. They go through the same
// derivation as the offloaded optimizer's (offload/cpu_optimizer.h, with CpuOptimizerOf), so every
// optimizer of the engine steps the same arithmetic. (The kernels' gradient and copy types from
// dtypes: offload::AdamGradTypeFor, offload::AdamCopyTypeFor.)
#pragma once

#include <cstdint>

#include "engine/zero/zero_sections.h"
#include "engine/zero/offload_options.h"
#include "kernels/cpu/adam.h"
#include "kernels/ref/lion_ref.h"
#include "offload/cpu_optimizer.h"

namespace sluice::zero {

// `step` is the 1-based step the update makes (bias correction).
inline kernels::AdamHyperparams AdamHyperparamsFor(const OptimizerConfig& config, double lr,
                                                   int64_t step) {
  return offload::AdamHyperparamsOf(CpuOptimizerOf(config), lr, step);
}

// Lion has no step count: no bias correction.
inline kernels::LionHyperparams LionHyperparamsFor(const OptimizerConfig& config, double lr) {
  return offload::LionHyperparamsOf(CpuOptimizerOf(config), lr);
}

}  // namespace sluice::zero
