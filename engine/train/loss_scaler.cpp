#include "engine/train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "runtime/logging.h"

namespace sluice::train {

LossScaler LossScaler::Disabled() { return LossScaler(); }

LossScaler LossScaler::FromConfig(const Fp16Config& config) {
  LossScaler scaler;
  if (config.loss_scale > 0) {
    scaler.scale_ = config.loss_scale;
    return scaler;
  }
  scaler.dynamic_ = true;
  scaler.scale_ = std::ldexp(1.0, config.initial_scale_power);
  scaler.min_scale_ = config.min_loss_scale;
  scaler.window_ = std::max<int64_t>(1, config.loss_scale_window);
  scaler.hysteresis_ = std::max(1, config.hysteresis);
  scaler.hysteresis_left_ = scaler.hysteresis_;
  return scaler;
}

Status LossScaler::Update(bool overflow) {
  if (!dynamic_) {
    ++iteration_;
    return OkStatus();
  }
  if (overflow) {
    if (hysteresis_ == 1 || hysteresis_left_ == 1) {
      if (scale_ == min_scale_) {
        return FailedPreconditionError(
            "fp16 gradients overflow at the minimum loss scale {} (fp16.min_loss_scale) with the "
            "hysteresis used up: training has diverged; lower optimizer.params.lr, tighten "
            "gradient_clipping, or train in bf16",
            scale_);
      }
      const double next = std::max(scale_ / 2.0, min_scale_);
      SLUICE_LOG(kInfo, "train", "fp16 overflow: step skipped, loss scale {} -> {}", scale_, next);
      scale_ = next;
    } else {
      SLUICE_LOG(kInfo, "train",
                 "fp16 overflow: step skipped, loss scale stays {} (hysteresis {} -> {})", scale_,
                 hysteresis_left_, hysteresis_left_ - 1);
      --hysteresis_left_;
    }
    last_overflow_iteration_ = iteration_;
  } else if ((iteration_ - last_overflow_iteration_) % window_ == 0) {
    hysteresis_left_ = hysteresis_;
    scale_ *= 2.0;
  }
  ++iteration_;
  return OkStatus();
}

}  // namespace sluice::train
