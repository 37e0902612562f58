// DeepSpeed's schedules against values computed by hand from lr_schedules.py's formulas.
#include "engine/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace sluice::train {
namespace {

SchedulerConfig Warmup(SchedulerType type, WarmupType warmup, int64_t n) {
  SchedulerConfig c = Config().scheduler;
  c.type = type;
  c.warmup_type = warmup;
  c.warmup_num_steps = n;
  return c;
}

LrSchedule Make(const SchedulerConfig& config, double lr) {
  Result<LrSchedule> schedule = LrSchedule::Create(config, lr);
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  return std::move(schedule).value();
}

TEST(LrScheduleTest, ConstantWithoutScheduler) {
  LrSchedule s = Make(Config().scheduler, 3e-4);
  EXPECT_DOUBLE_EQ(s.current_lr(), 3e-4);
  for (int i = 0; i < 5; ++i) s.Step();
  EXPECT_DOUBLE_EQ(s.current_lr(), 3e-4);
  EXPECT_DOUBLE_EQ(s.LrAt(123456), 3e-4);
}

TEST(LrScheduleTest, WarmupLrLog) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupLR, WarmupType::kLog, 10);
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 0.01;
  LrSchedule s = Make(c, 0.5);
  EXPECT_DOUBLE_EQ(s.LrAt(-1), 0.0);  // before the first step: min_lr
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.0);   // ln(1) = 0
  EXPECT_NEAR(s.LrAt(1), 0.01 * std::log(2.0) / std::log(10.0), 1e-15);  // 0.0030103
  EXPECT_NEAR(s.LrAt(4), 0.01 * 0.69897000433601886, 1e-15);             // log10(5)
  EXPECT_NEAR(s.LrAt(9), 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(s.LrAt(10), 0.01);
  EXPECT_DOUBLE_EQ(s.LrAt(100000), 0.01);
}

TEST(LrScheduleTest, WarmupLrLinearWithMinimum) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupLR, WarmupType::kLinear, 4);
  c.warmup_min_lr = 0.001;
  c.warmup_max_lr = 0.011;
  LrSchedule s = Make(c, 1.0);
  EXPECT_DOUBLE_EQ(s.LrAt(-1), 0.001);
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.001);
  EXPECT_NEAR(s.LrAt(1), 0.0035, 1e-15);
  EXPECT_NEAR(s.LrAt(3), 0.0085, 1e-15);
  EXPECT_DOUBLE_EQ(s.LrAt(4), 0.011);
}

TEST(LrScheduleTest, WarmupStepsAreClampedToTwoAsInDeepSpeed) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupLR, WarmupType::kLinear, 0);
  c.warmup_max_lr = 0.02;
  LrSchedule s = Make(c, 1.0);
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.0);
  EXPECT_DOUBLE_EQ(s.LrAt(1), 0.01);  // 1 / max(2, 0)
  EXPECT_DOUBLE_EQ(s.LrAt(2), 0.02);
}

TEST(LrScheduleTest, WarmupDecayLr) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupDecayLR, WarmupType::kLinear, 4);
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 0.01;
  c.total_num_steps = 14;
  LrSchedule s = Make(c, 1.0);
  EXPECT_NEAR(s.LrAt(2), 0.005, 1e-15);
  EXPECT_DOUBLE_EQ(s.LrAt(4), 0.01);      // (14 - 4) / (14 - 4)
  EXPECT_NEAR(s.LrAt(9), 0.005, 1e-15);   // (14 - 9) / 10
  EXPECT_NEAR(s.LrAt(13), 0.001, 1e-15);  // (14 - 13) / 10
  EXPECT_DOUBLE_EQ(s.LrAt(14), 0.0);
  EXPECT_DOUBLE_EQ(s.LrAt(30), 0.0);  // max(0, ...)
}

TEST(LrScheduleTest, WarmupCosineLr) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupCosineLR, WarmupType::kLinear, 4);
  c.total_num_steps = 14;
  c.warmup_min_ratio = 0.2;
  c.cos_min_ratio = 0.1;
  LrSchedule s = Make(c, 0.1);
  EXPECT_DOUBLE_EQ(s.LrAt(-1), 0.0);         // DeepSpeed's get_lr() before it started
  EXPECT_NEAR(s.LrAt(0), 0.1 * 0.2, 1e-15);  // wmin + 0 * (1 - wmin)
  EXPECT_NEAR(s.LrAt(2), 0.1 * (0.2 + 0.5 * 0.8), 1e-15);
  // t = 4: progress (4 - 4 + 1) / (14 - 4) = 0.1; 0.1 + 0.9 * (1 + cos(0.1 pi)) / 2.
  EXPECT_NEAR(s.LrAt(4), 0.1 * 0.97797543233, 1e-12);
  // t = 8: progress 0.5; 0.1 + 0.9 * 0.5.
  EXPECT_NEAR(s.LrAt(8), 0.1 * 0.55, 1e-15);
  EXPECT_NEAR(s.LrAt(13), 0.1 * 0.1, 1e-15);  // progress 1
  EXPECT_NEAR(s.LrAt(50), 0.1 * 0.1, 1e-15);  // clamped at 1
}

TEST(LrScheduleTest, SteppingFollowsTheDeepSpeedEngine) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupLR, WarmupType::kLinear, 10);
  c.warmup_min_lr = 0.001;
  c.warmup_max_lr = 0.011;
  LrSchedule s = Make(c, 1.0);
  // Step 1 runs at the initial rate, step 2 at iteration 0, step k at iteration k - 2.
  EXPECT_EQ(s.last_batch_iteration(), -1);
  EXPECT_DOUBLE_EQ(s.current_lr(), 0.001);
  s.Step();
  EXPECT_EQ(s.last_batch_iteration(), 0);
  EXPECT_DOUBLE_EQ(s.current_lr(), 0.001);
  s.Step();
  EXPECT_NEAR(s.current_lr(), 0.002, 1e-15);
}

TEST(LrScheduleTest, ResumesFromLastBatchIteration) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupLR, WarmupType::kLinear, 10);
  c.warmup_max_lr = 0.01;
  c.last_batch_iteration = 5;
  LrSchedule s = Make(c, 1.0);
  EXPECT_NEAR(s.current_lr(), 0.005, 1e-15);
}

TEST(LrScheduleTest, RejectsMissingTotalSteps) {
  SchedulerConfig c = Warmup(SchedulerType::kWarmupCosineLR, WarmupType::kLog, 10);
  c.total_num_steps = 0;
  Result<LrSchedule> s = LrSchedule::Create(c, 1e-3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("scheduler.params.total_num_steps"), std::string::npos);
}

}  // namespace
}  // namespace sluice::train
