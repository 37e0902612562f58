// The CPU optimizer an offloaded step runs over a tile: Adam / AdamW (kernels/cpu/adam.h) or Lion
// (kernels/cpu/lion.h), with its hyperparameters, as offload's own struct (the engine builds it
// from its optimizer section: engine/zero/offload_options.h). The kernels' arguments are derived
// here, in one place, so that every optimizer stepping on the CPU (and ShardedAdam, whose
// hyperparameters come from AdamHyperparamsOf too) does the same arithmetic.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/adam.h"
#include "kernels/ref/lion_ref.h"
#include "runtime/dtype.h"

namespace sluice::offload {

enum class CpuOptimizerKind { kAdam, kLion };

struct CpuOptimizer {
  CpuOptimizerKind kind = CpuOptimizerKind::kAdam;
  std::string name = "AdamW";  // for messages
  // Adam: decoupled weight decay (AdamW); Lion always decouples it.
  bool adam_w_mode = true;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;  // Adam only
  double weight_decay = 0.0;
  bool bias_correction = true;  // Adam only

  // Moment tensors per element besides the fp32 master weights: 2 for Adam, 1 for Lion.
  int moments() const { return kind == CpuOptimizerKind::kLion ? 1 : 2; }
};

// `step` is the 1-based step the update makes (bias correction).
kernels::AdamHyperparams AdamHyperparamsOf(const CpuOptimizer& optimizer, double lr, int64_t step);
// Lion has no step count: no bias correction.
kernels::LionHyperparams LionHyperparamsOf(const CpuOptimizer& optimizer, double lr);

// The kernel reads gradients in the training dtype.
kernels::AdamGradType AdamGradTypeFor(DType dtype);
// The copy of the updated parameters the kernel writes: the parameter dtype, none for fp32 (the
// master weights are the parameters then).
kernels::AdamCopyType AdamCopyTypeFor(DType param_dtype);

// Lion's tensors: t without exp_avg_sq.
kernels::LionTensors LionTensorsOf(const kernels::AdamTensors& t);

// Empty when CpuOptimizerStep may run with these arguments, else what is wrong, naming the field.
std::string CpuOptimizerStepError(const CpuOptimizer& optimizer, const kernels::AdamTensors& t,
                                  double lr, int64_t step, const kernels::AdamThreading& threading);
// `step` is the 1-based step being taken (Adam's bias correction; Lion ignores it, and reads no
// exp_avg_sq). Aborts on arguments CpuOptimizerStepError rejects.
void CpuOptimizerStep(const CpuOptimizer& optimizer, const kernels::AdamTensors& t, double lr,
                      int64_t step, float grad_scale, const kernels::AdamThreading& threading);

}  // namespace sluice::offload
