// fp16 loss scaling with DeepSpeed's semantics (runtime/fp16/loss_scaler.py, DynamicLossScaler).
//
// The loss is multiplied by scale() before the backward pass so that small fp16 gradients do
// not flush to zero; the optimizer divides it out again. After each optimizer step the caller
// reports whether the gradients overflowed (an inf or NaN anywhere), and Update() adjusts:
// - overflow: the step is skipped. With hysteresis left (fp16.hysteresis > 1 and not yet used
//   up) only the hysteresis counter drops ("delayed shift"); once it is exhausted the scale is
//   halved, floored at fp16.min_loss_scale. An overflow while the scale is already at the floor
//   and the hysteresis is exhausted is an error, as in DeepSpeed (raise_error_at_min_scale): the
//   run has diverged and scaling cannot rescue it.
// - no overflow: every fp16.loss_scale_window steps since the last overflow (counted from
//   iteration 0, as DeepSpeed's last_overflow_iter = -1 start does) the scale doubles and the
//   hysteresis is refilled.
// A static scale (fp16.loss_scale > 0) never changes; a disabled scaler (bf16 or fp32 training)
// has scale 1 and never changes either.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "engine/config/config.h"
#include "runtime/status.h"

namespace sluice::train {

class LossScaler {
 public:
  // Scale 1, never adjusted.
  static LossScaler Disabled();
  // From the fp16 section: dynamic when fp16.loss_scale is 0, else static at that value.
  static LossScaler FromConfig(const Fp16Config& config);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Overflows still tolerated before the scale is halved.
  int hysteresis_left() const { return hysteresis_left_; }
  // Update() calls so far (DeepSpeed's cur_iter).
  int64_t iteration() const { return iteration_; }

  // Records one optimizer step's outcome (DeepSpeed's update_scale). FailedPrecondition when
  // the gradients overflow at the minimum scale with no hysteresis left.
  Status Update(bool overflow);

  // The position a checkpoint stores: {"scale", "hysteresis_left", "iteration",
  // "last_overflow_iteration"}. The settings (dynamic, window, floor) come from the config.
  nlohmann::ordered_json SaveState() const;
  // InvalidArgument naming the field when `state` is malformed.
  Status RestoreState(const nlohmann::json& state);

 private:
  LossScaler() = default;

  bool dynamic_ = false;
  double scale_ = 1.0;
  double min_scale_ = 1.0;
  int64_t window_ = 1000;
  int hysteresis_ = 1;  // DeepSpeed's delayed_shift
  int hysteresis_left_ = 1;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
};

}  // namespace sluice::train
