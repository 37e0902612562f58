// The CPU optimizer kernels' arguments that every optimizer of the engine (ShardedAdam,
// OffloadedAdam) derives the same way: hyperparameters from the optimizer section (Adam's or
// Lion's), and the kernels' gradient and copy types from dtypes. One place, so both optimizers
// step the same arithmetic.
#pragma once

#include <cstdint>

#include "engine/config/config.h"
#include "kernels/cpu/adam.h"
#include "kernels/ref/lion_ref.h"
#include "runtime/dtype.h"

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
  hyper.bias_correction = config.bias_correction;
  hyper.step = step;
  return hyper;
}

// Lion has no step count: no bias correction.
inline kernels::LionHyperparams LionHyperparamsFor(const OptimizerConfig& config, double lr) {
  kernels::LionHyperparams hyper;
  hyper.lr = static_cast<float>(lr);
  hyper.beta1 = static_cast<float>(config.beta1);
  hyper.beta2 = static_cast<float>(config.beta2);
  hyper.weight_decay = static_cast<float>(config.weight_decay);
  return hyper;
}

// The kernel reads gradients in the training dtype.
inline kernels::AdamGradType AdamGradTypeFor(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return kernels::AdamGradType::kBF16;
    case DType::kF16:
      return kernels::AdamGradType::kF16;
    default:
      return kernels::AdamGradType::kF32;
  }
}

// The copy of the updated parameters the kernel writes: the parameter dtype, none for fp32 (the
// master weights are the parameters then).
inline kernels::AdamCopyType AdamCopyTypeFor(DType param_dtype) {
  switch (param_dtype) {
    case DType::kBF16:
      return kernels::AdamCopyType::kBF16;
    case DType::kF16:
      return kernels::AdamCopyType::kF16;
    default:
      return kernels::AdamCopyType::kNone;
  }
}

}  // namespace sluice::zero
