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

nlohmann::ordered_json LossScaler::SaveState() const {
  return {{"scale", scale_},
          {"hysteresis_left", hysteresis_left_},
          {"iteration", iteration_},
          {"last_overflow_iteration", last_overflow_iteration_}};
}

Status LossScaler::RestoreState(const nlohmann::json& state) {
  auto field = [&state](const char* name, bool integer) -> Result<const nlohmann::json*> {
    auto it = state.find(name);
    if (it == state.end() || (integer ? !it->is_number_integer() : !it->is_number())) {
      return InvalidArgumentError("loss scaler state: field '{}' is missing or not {}", name,
                                  integer ? "an integer" : "a number");
    }
    return &*it;
  };
  if (!state.is_object()) return InvalidArgumentError("loss scaler state is not a JSON object");
  SLUICE_ASSIGN_OR_RETURN(const nlohmann::json* scale, field("scale", false));
  SLUICE_ASSIGN_OR_RETURN(const nlohmann::json* hysteresis, field("hysteresis_left", true));
  SLUICE_ASSIGN_OR_RETURN(const nlohmann::json* iteration, field("iteration", true));
  SLUICE_ASSIGN_OR_RETURN(const nlohmann::json* last, field("last_overflow_iteration", true));
  const double value = scale->get<double>();
  if (!(value > 0) || !std::isfinite(value)) {
    return InvalidArgumentError("loss scaler state: field 'scale' is {}, not a positive number",
                                value);
  }
  scale_ = value;
  hysteresis_left_ = hysteresis->get<int>();
  iteration_ = iteration->get<int64_t>();
  last_overflow_iteration_ = last->get<int64_t>();
  return OkStatus();
}

}  // namespace sluice::train
