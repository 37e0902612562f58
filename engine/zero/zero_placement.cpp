#include "engine/zero/zero_placement.h"

namespace sluice::zero {
namespace {

StateTier TierOf(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone:
      return StateTier::kDevice;
    case OffloadDevice::kCpu:
      return StateTier::kHost;
    case OffloadDevice::kNvme:
      return StateTier::kNvme;
  }
  return StateTier::kDevice;
}

}  // namespace

ZeroPlacement PlaceZeroState(const ZeroOptions& options) {
  const OffloadOptimizerConfig& oo = options.offload_optimizer;
  ZeroPlacement p;
  p.replicated_params = options.stage <= 2;
  p.replicated_grads = options.stage <= 1;
  if (options.stage == 0 && options.param_dtype == DType::kF32) {
    p.param_shard = StateTier::kNone;
  } else {
    p.param_shard = TierOf(options.offload_param.device);
  }
  p.optimizer_state = TierOf(oo.device);
  if (options.stage == 0) {
    p.grad_shard = StateTier::kNone;
  } else if (oo.device != OffloadDevice::kNone && !oo.partial()) {
    // A partial offload (split_optimizer.h) steps its first part on the device, which reads its
    // gradients there; its offloaded part copies its own tiles off.
    p.grad_shard = StateTier::kHost;
  }
  return p;
}

}  // namespace sluice::zero
