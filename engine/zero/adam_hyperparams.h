// The CPU Adam kernel's hyperparameters for one step, from the optimizer section: every optimizer
// of the engine (ShardedAdam, OffloadedAdam) builds them here, so they step the same arithmetic.
#pragma once

#include <cstdint>

#include "engine/config/config.h"
#include "kernels/cpu/adam.h"

namespace sluice::zero {

// `step` is the 1-based step the update makes (bias correction).
inline kernels::AdamHyperparams AdamHyperparamsFor(const OptimizerConfig& config, double lr,
                                                   int64_t step) {
  kernels::AdamHyperparams hyper;
  hyper.lr = static_cast<float>(lr);
  hyper.beta1 = static_cast<float>(config.beta1);
  hyper.beta2 = static_cast<float>(config.beta2);
  hyper.eps = static_cast<float>(config.eps);
  hyper.weight_decay = static_cast<float>(config.weight_decay);
  hyper.adamw_mode = config.adam_w_mode;
  hyper.bias_correction = true;
  hyper.step = step;
  return hyper;
}

}  // namespace sluice::zero
