#include "engine/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace sluice::train {

Result<LrSchedule> LrSchedule::Create(const SchedulerConfig& config, double optimizer_lr) {
  if (!std::isfinite(optimizer_lr) || optimizer_lr < 0) {
    return InvalidArgumentError("optimizer.params.lr = {} must be a finite rate >= 0",
                                optimizer_lr);
  }
  if (config.last_batch_iteration < -1) {
    return InvalidArgumentError(
        "scheduler.params.last_batch_iteration = {} must be -1 (a fresh run) or the index of the "
        "last step taken",
        config.last_batch_iteration);
  }
  const bool has_total =
      config.type == SchedulerType::kWarmupDecayLR || config.type == SchedulerType::kWarmupCosineLR;
  if (has_total && config.total_num_steps < 1) {
    return InvalidArgumentError(
        "scheduler.params.total_num_steps = {} must be at least 1 for this scheduler",
        config.total_num_steps);
  }
  return LrSchedule(config, optimizer_lr);
}

LrSchedule::LrSchedule(const SchedulerConfig& config, double optimizer_lr)
    : config_(config),
      optimizer_lr_(optimizer_lr),
      warmup_num_steps_(std::max<int64_t>(2, config.warmup_num_steps)),
      last_batch_iteration_(config.last_batch_iteration) {}

double LrSchedule::WarmupGamma(int64_t t) const {
  const double n = static_cast<double>(warmup_num_steps_);
  if (config_.warmup_type == WarmupType::kLinear) return static_cast<double>(t) / n;
  // DeepSpeed multiplies by a precomputed 1 / ln(N) rather than dividing.
  const double inverse_log_warm_up = 1.0 / std::log(n);
  return inverse_log_warm_up * std::log(static_cast<double>(t) + 1.0);
}

double LrSchedule::LrAt(int64_t t) const {
  switch (config_.type) {
    case SchedulerType::kNone:
      return optimizer_lr_;
    case SchedulerType::kWarmupLR:
    case SchedulerType::kWarmupDecayLR: {
      const double min_lr = config_.warmup_min_lr;
      const double delta = config_.warmup_max_lr - config_.warmup_min_lr;
      if (t < 0) return min_lr;
      double gamma = 1.0;
      if (t < warmup_num_steps_) {
        gamma = WarmupGamma(t);
      } else if (config_.type == SchedulerType::kWarmupDecayLR) {
        const double total = static_cast<double>(config_.total_num_steps);
        gamma = std::max(0.0, (total - static_cast<double>(t)) /
                                  std::max(1.0, total - static_cast<double>(warmup_num_steps_)));
      }
      return min_lr + delta * gamma;
    }
    case SchedulerType::kWarmupCosineLR: {
      if (t < 0) return 0.0;
      double ratio;
      if (t < warmup_num_steps_) {
        const double wmin = config_.warmup_min_ratio;
        ratio = wmin + WarmupGamma(t) * (1.0 - wmin);
      } else {
        const double total = static_cast<double>(config_.total_num_steps);
        const double n = static_cast<double>(warmup_num_steps_);
        const double progress =
            std::min(1.0, (static_cast<double>(t) - n + 1.0) / std::max(1.0, total - n));
        const double cmin = config_.cos_min_ratio;
        ratio = std::max(0.0,
                         cmin + (1.0 - cmin) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0);
      }
      return optimizer_lr_ * ratio;
    }
  }
  return optimizer_lr_;
}

}  // namespace sluice::train
