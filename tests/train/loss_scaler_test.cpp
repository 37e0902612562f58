// The fp16 loss scaler through overflow sequences, against DeepSpeed's DynamicLossScaler.
#include "engine/train/loss_scaler.h"

#include <gtest/gtest.h>

namespace sluice::train {
namespace {

Fp16Config Dynamic(int power, int64_t window, int hysteresis, double min_scale) {
  Fp16Config c = Config().fp16;
  c.enabled = true;
  c.loss_scale = 0;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.min_loss_scale = min_scale;
  return c;
}

TEST(LossScalerTest, DisabledIsOneForever) {
  LossScaler s = LossScaler::Disabled();
  EXPECT_EQ(s.scale(), 1.0);
  ASSERT_TRUE(s.Update(true).ok());
  ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScalerTest, StaticScaleNeverChanges) {
  Fp16Config c = Config().fp16;
  c.loss_scale = 128;
  LossScaler s = LossScaler::FromConfig(c);
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.Update(i % 2 == 0).ok());
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScalerTest, DoublesAfterAWindowOfCleanSteps) {
  LossScaler s = LossScaler::FromConfig(Dynamic(16, 3, 2, 1));
  EXPECT_EQ(s.scale(), 65536.0);
  ASSERT_TRUE(s.Update(false).ok());
  ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 65536.0);
  // DeepSpeed starts with last_overflow_iter = -1: (2 - -1) % 3 == 0 at the third clean step.
  ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 131072.0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 262144.0);
}

TEST(LossScalerTest, OverflowSequenceWithHysteresis) {
  LossScaler s = LossScaler::FromConfig(Dynamic(4, 3, 2, 2));
  struct Expect {
    bool overflow;
    double scale_after;
    int hysteresis_after;
  };
  const Expect sequence[] = {
      {true, 16, 1},   // iter 0: first overflow only uses up hysteresis
      {true, 8, 1},    // iter 1: halved
      {false, 8, 1},   // iter 2: (2 - 1) % 3 != 0
      {false, 8, 1},   // iter 3
      {false, 16, 2},  // iter 4: (4 - 1) % 3 == 0: doubled, hysteresis refilled
      {true, 16, 1},   // iter 5
      {true, 8, 1},    // iter 6
      {true, 4, 1},    // iter 7
      {true, 2, 1},    // iter 8: floored at min_loss_scale 2
  };
  int i = 0;
  for (const Expect& e : sequence) {
    ASSERT_TRUE(s.Update(e.overflow).ok()) << "iteration " << i;
    EXPECT_EQ(s.scale(), e.scale_after) << "iteration " << i;
    EXPECT_EQ(s.hysteresis_left(), e.hysteresis_after) << "iteration " << i;
    ++i;
  }
  EXPECT_EQ(s.iteration(), 9);
  // At the floor with the hysteresis used up: DeepSpeed raises; the run has diverged.
  Status status = s.Update(true);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("fp16.min_loss_scale"), std::string::npos) << status.message();
}

TEST(LossScalerTest, HysteresisOneHalvesAtOnce) {
  LossScaler s = LossScaler::FromConfig(Dynamic(10, 1000, 1, 1));
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 512.0);
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 256.0);
}

}  // namespace
}  // namespace sluice::train
