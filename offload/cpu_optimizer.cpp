#include "offload/cpu_optimizer.h"

#include "kernels/cpu/lion.h"

namespace sluice::offload {

kernels::AdamHyperparams AdamHyperparamsOf(const CpuOptimizer& optimizer, double lr, int64_t step) {
  kernels::AdamHyperparams hyper;
  hyper.lr = static_cast<float>(lr);
  hyper.beta1 = static_cast<float>(optimizer.beta1);
  hyper.beta2 = static_cast<float>(optimizer.beta2);
  hyper.eps = static_cast<float>(optimizer.eps);
  hyper.weight_decay = static_cast<float>(optimizer.weight_decay);
  hyper.adamw_mode = optimizer.adam_w_mode;
  hyper.bias_correction = optimizer.bias_correction;
  hyper.step = step;
  return hyper;
}

kernels::LionHyperparams LionHyperparamsOf(const CpuOptimizer& optimizer, double lr) {
  kernels::LionHyperparams hyper;
  hyper.lr = static_cast<float>(lr);
  hyper.beta1 = static_cast<float>(optimizer.beta1);
  hyper.beta2 = static_cast<float>(optimizer.beta2);
  hyper.weight_decay = static_cast<float>(optimizer.weight_decay);
  return hyper;
}

kernels::AdamGradType AdamGradTypeFor(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return kernels::AdamGradType::kBF16;
    case DType::kF16:
      return kernels::AdamGradType::kF16;
    default:
      return kernels::AdamGradType::kF32;
  }
}

kernels::AdamCopyType AdamCopyTypeFor(DType param_dtype) {
  switch (param_dtype) {
    case DType::kBF16:
      return kernels::AdamCopyType::kBF16;
    case DType::kF16:
      return kernels::AdamCopyType::kF16;
    default:
      return kernels::AdamCopyType::kNone;
  }
}

kernels::LionTensors LionTensorsOf(const kernels::AdamTensors& t) {
  return kernels::LionTensors{.params = t.params,
                              .exp_avg = t.exp_avg,
                              .grads = t.grads,
                              .grad_type = t.grad_type,
                              .param_copy = t.param_copy,
                              .copy_type = t.copy_type,
                              .count = t.count};
}

std::string CpuOptimizerStepError(const CpuOptimizer& optimizer, const kernels::AdamTensors& t,
                                  double lr, int64_t step,
                                  const kernels::AdamThreading& threading) {
  if (optimizer.kind == CpuOptimizerKind::kLion) {
    return kernels::LionStepArgsError(LionTensorsOf(t), LionHyperparamsOf(optimizer, lr),
                                      threading);
  }
  return kernels::AdamStepArgsError(t, AdamHyperparamsOf(optimizer, lr, step), threading);
}

void CpuOptimizerStep(const CpuOptimizer& optimizer, const kernels::AdamTensors& t, double lr,
                      int64_t step, float grad_scale, const kernels::AdamThreading& threading) {
  if (optimizer.kind == CpuOptimizerKind::kLion) {
    kernels::LionStep(LionTensorsOf(t), LionHyperparamsOf(optimizer, lr), grad_scale, threading);
    return;
  }
  kernels::AdamStep(t, AdamHyperparamsOf(optimizer, lr, step), grad_scale, threading);
}

}  // namespace sluice::offload
