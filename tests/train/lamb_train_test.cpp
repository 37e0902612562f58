// LAMB through the trainer on the demo's model (configs/demo_gpt.yaml: a byte-level GPT-2 of 1.3M
// parameters in bf16, here on a synthetic text corpus), its optimizer section swapped for
// DeepSpeed's Lamb (zero_allow_untested_optimizer true, as DeepSpeed requires at stages 1-3): the
// loss falls at stage 0 and at stage 2, and the two runs stay within rounding of each other on one
// rank (the same pieces, each parameter whole).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/train/demo_train_util.h"

namespace sluice::train {
namespace {

constexpr int kSteps = 40;

// Lamb in place of the demo's AdamW, at DeepSpeed's default trust-ratio clamp: its small initial
// weights start at min_coeff, so the rate is higher than AdamW's.
constexpr char kLambSection[] =
    "zero_allow_untested_optimizer: true\n"
    "optimizer:\n"
    "  type: Lamb\n"
    "  params: {lr: 5.0e-2, betas: [0.9, 0.999], eps: 1.0e-6, weight_decay: 0.01,\n"
    "           max_coeff: 10.0, min_coeff: 0.01}\n";

std::vector<double> Train(const std::vector<std::string>& more) {
  return test_util::TrainDemo(kLambSection, OptimizerType::kLamb, "lamb_demo", kSteps, more,
                              /*gather_params=*/false)
      .losses;
}

using test_util::Mean;

TEST(LambTrainTest, DemoModelLossFallsAtStagesZeroAndTwo) {
  const std::vector<double> stage0 = Train({"zero_optimization.stage=0"});
  ASSERT_EQ(stage0.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(stage0.front(), std::log(256.0), 0.3) << "bytes start uniform";
  EXPECT_LT(Mean(stage0, kSteps - 5, kSteps), Mean(stage0, 0, 5) - 1.0)
      << "first " << stage0.front() << " last " << stage0.back();
  std::printf("Lamb on the demo model: loss %.3f -> %.3f (mean of the last 5: %.3f) in %d steps\n",
              stage0.front(), stage0.back(), Mean(stage0, kSteps - 5, kSteps), kSteps);

  const std::vector<double> stage2 = Train({"zero_optimization.stage=2"});
  ASSERT_EQ(stage2.size(), stage0.size());
  double worst = 0.0;
  for (size_t i = 0; i < stage0.size(); ++i) {
    worst = std::max(worst, std::abs(stage2[i] - stage0[i]) / std::abs(stage0[i]));
  }
  EXPECT_LE(worst, 1e-4) << "stage 2 left stage 0's curve";
}

}  // namespace
}  // namespace sluice::train
