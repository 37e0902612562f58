#include "engine/zero/optimizer_step.h"

#include <fmt/format.h>

#include "kernels/cpu/lion.h"

namespace sluice::zero {

Status CheckLionOnDevice(const ops::OpsBackend& ops) {
  if (ops.kind() != DeviceKind::kCuda) return OkStatus();
  return UnimplementedError(
      "optimizer.type Lion with zero_optimization.offload_optimizer.device none keeps Lion's "
      "state on the {} device, and Sluice has no Lion kernel for it yet: set "
      "zero_optimization.offload_optimizer.device to cpu or nvme (Lion then runs as the "
      "fused CPU kernel, as DeepSpeed's DeepSpeedCPULion does), or use optimizer.type AdamW",
      DeviceKindName(ops.kind()));
}

Status EnqueueLionStep(ops::OpsBackend& ops, Stream& stream, const kernels::LionTensors& t,
                       const kernels::LionHyperparams& hyper, float grad_scale,
                       const kernels::AdamThreading& threading) {
  SLUICE_RETURN_IF_ERROR(CheckLionOnDevice(ops));
  if (std::string error = kernels::LionStepArgsError(t, hyper, threading); !error.empty()) {
    return InvalidArgumentError("LionStep: {}", error);
  }
  // The ref column steps in the scalar reference, as its AdamStep does; results are the same bits.
  const bool reference = ops.name() == "ref";
  return ops.device().LaunchHostFunc(
      stream,
      [t, hyper, grad_scale, threading, reference]() {
        if (reference) {
          kernels::LionStepReference(t, hyper, grad_scale);
        } else {
          kernels::LionStep(t, hyper, grad_scale, threading);
        }
        return OkStatus();
      },
      "LionStep");
}

}  // namespace sluice::zero
