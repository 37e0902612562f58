// DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py): WarmupLR,
// WarmupDecayLR, WarmupCosineLR, and a constant rate when no scheduler is configured.
//
// Stepping follows DeepSpeed's engine exactly: the schedule starts at last_batch_iteration
// (-1 for a fresh run), the optimizer step uses current_lr(), and Step() is called after every
// APPLIED optimizer step (a step skipped on overflow does not advance it). So a fresh run's first
// step uses the initial rate (WarmupLR/WarmupDecayLR: warmup_min_lr; WarmupCosineLR: 0), its
// second step the rate of iteration 0, its k-th applied step the rate of iteration k - 2.
#pragma once

#include <cstdint>

#include "engine/config/config.h"
#include "runtime/status.h"

namespace sluice::train {

class LrSchedule {
 public:
  // `optimizer_lr` is optimizer.params.lr: the constant rate, and WarmupCosineLR's base rate.
  // InvalidArgument (naming the scheduler.params key) for parameters DeepSpeed would reject or
  // divide by zero with.
  static Result<LrSchedule> Create(const SchedulerConfig& config, double optimizer_lr);

  // DeepSpeed's get_lr() at `last_batch_iteration`; a negative iteration gives the initial rate.
  double LrAt(int64_t last_batch_iteration) const;

  // The rate the next optimizer step uses.
  double current_lr() const { return LrAt(last_batch_iteration_); }
  int64_t last_batch_iteration() const { return last_batch_iteration_; }
  // After an applied optimizer step.
  void Step() { ++last_batch_iteration_; }
  // Continues from a checkpoint's position (the last_batch_iteration() it saved).
  void RestorePosition(int64_t last_batch_iteration) {
    last_batch_iteration_ = last_batch_iteration;
  }

  SchedulerType type() const { return config_.type; }

 private:
  LrSchedule(const SchedulerConfig& config, double optimizer_lr);
  // The warm-up fraction gamma in [0, 1] at iteration t < warmup_num_steps_.
  double WarmupGamma(int64_t t) const;

  SchedulerConfig config_;
  double optimizer_lr_;
  int64_t warmup_num_steps_;  // DeepSpeed clamps it to at least 2 (the log warm-up divides by it)
  int64_t last_batch_iteration_;
};

}  // namespace sluice::train
