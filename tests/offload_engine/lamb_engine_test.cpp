// LAMB (optimizer.type Lamb) in the ZeRO engine on 1, 2 and 3 ranks (mpirun -np 1, 2, 3):
//   - stages 0-3 against the single-rank run (zero_test_util.h's reference with Lamb, each
//     parameter one piece): the loss falls; on one rank the same bits (every stage's layout is then
//     the flat order, each parameter whole); on more ranks within a declared tolerance, since a
//     parameter's norms are then sums of per-rank pieces added in rank order (and each rank's
//     gradient sums its own rows before the average);
//   - on two ranks without clipping, stages 1-3 bitwise equal to each other (the same pieces, the
//     same rank-order sums) and stage 0 within the tolerance;
//   - LAMB's step is not AdamW's;
//   - the state holds both moments (Adam's bytes); offloaded state is refused naming the keys.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "offload_engine_test_util.h"
#include "offload_outcome.h"
#include "runtime/check.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

// Losses of an N-rank run against the single-rank run: Adam's equivalence test holds 1e-6; LAMB's
// norms add the ranks' pieces in another order, which moves each trust ratio within rounding.
constexpr double kLossTolerance = 1e-5;
constexpr double kParamTolerance = 1e-5;

// The tiny model's matrices start at a norm far below their updates', so with DeepSpeed's
// min_coeff 0.01 they hardly move in 20 steps; bing_bert's max_coeff 0.3 and a min_coeff of 0.1
// let the loss fall as AdamW's does at 1e-3.
OptimizerConfig Lamb() {
  OptimizerConfig o = Config().optimizer;
  o.type = OptimizerType::kLamb;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-6;
  o.weight_decay = 0.01;
  o.max_coeff = 0.3;
  o.min_coeff = 0.1;
  return o;
}

double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  SLUICE_CHECK_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return worst;
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0.0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

ZeroOptions LambOptions(int stage, DType dtype) {
  ZeroOptions o = OffloadTestOptions(stage, dtype, OffloadDevice::kNone, OffloadDevice::kNone, "");
  o.optimizer = Lamb();
  return o;
}

TrainSettings LambSettings(DType dtype, int64_t steps) {
  TrainSettings s = OffloadTrainSettings(dtype, steps);
  s.lr = 2e-2;
  return s;
}

class LambStageTest : public ::testing::TestWithParam<int> {};

TEST_P(LambStageTest, LossFallsAndMatchesTheSingleRankRun) {
  const int stage = GetParam();
  const TrainSettings settings = LambSettings(DType::kF32, /*steps=*/20);
  const RunResult reference = RunReference(TinyGpt(), settings, Lamb());
  const OffloadOutcome run = TrainOffload(LambOptions(stage, DType::kF32), settings);
  const std::string what = fmt::format("Lamb stage {} on {} rank(s)", stage, TestWorld().size());
  ASSERT_EQ(run.run.losses.size(), 20u);
  // Each step sees another batch: the means of the first and last five steps.
  EXPECT_LT(Mean(run.run.losses, 15, 20), Mean(run.run.losses, 0, 5) - 0.1) << what;
  EXPECT_EQ(run.step, 20) << what;
  EXPECT_TRUE(
      std::any_of(run.exp_avg_sq.begin(), run.exp_avg_sq.end(), [](float v) { return v > 0.0f; }))
      << what << ": Lamb keeps exp_avg_sq";
  if (TestWorld().size() == 1) {
    EXPECT_TRUE(Bitwise(run.run.losses, reference.losses)) << what;
    EXPECT_TRUE(Bitwise(run.run.grad_norms, reference.grad_norms)) << what;
    EXPECT_TRUE(Bitwise(run.run.params, reference.params)) << what;
  } else {
    EXPECT_LE(MaxRelativeDifference(run.run.losses, reference.losses), kLossTolerance) << what;
    // Each parameter's trust ratio from its whole norms: the parameters stay within rounding of
    // the single-rank run's (a ratio from one rank's piece alone moves them by far more).
    EXPECT_LE(MaxAbsDifference(run.run.params, reference.params), kParamTolerance) << what;
  }
  if (TestWorld().rank() == 0) {
    std::printf(
        "%s: loss %.4f -> %.4f, max difference to one rank %.3g relative, parameters %.3g\n",
        what.c_str(), run.run.losses.front(), run.run.losses.back(),
        MaxRelativeDifference(run.run.losses, reference.losses),
        MaxAbsDifference(run.run.params, reference.params));
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, LambStageTest, ::testing::Values(0, 1, 2, 3), StageCaseName);

TEST(LambStages, ShardedStagesAgreeBitwiseOnTwoRanksWithoutClipping) {
  if (TestWorld().size() != 2) GTEST_SKIP() << "the bitwise claim is about two ranks";
  TrainSettings settings = LambSettings(DType::kF32, /*steps=*/8);
  settings.max_grad_norm = 0.0;
  const OffloadOutcome stage0 = TrainOffload(LambOptions(0, DType::kF32), settings);
  const OffloadOutcome stage1 = TrainOffload(LambOptions(1, DType::kF32), settings);
  EXPECT_LE(MaxRelativeDifference(stage1.run.losses, stage0.run.losses), kLossTolerance);
  for (int stage = 2; stage <= 3; ++stage) {
    const OffloadOutcome run = TrainOffload(LambOptions(stage, DType::kF32), settings);
    EXPECT_TRUE(Bitwise(run.run.losses, stage1.run.losses)) << "stage " << stage;
    EXPECT_TRUE(Bitwise(run.run.params, stage1.run.params)) << "stage " << stage;
  }
}

TEST(LambStages, Bf16TrainsAndMatchesTheSingleRankRun) {
  const TrainSettings settings = LambSettings(DType::kBF16, /*steps=*/10);
  const RunResult reference = RunReference(TinyGpt(), settings, Lamb());
  const OffloadOutcome run = TrainOffload(LambOptions(3, DType::kBF16), settings);
  EXPECT_LT(Mean(run.run.losses, 7, 10), Mean(run.run.losses, 0, 3)) << "bf16 stage 3";
  if (TestWorld().size() == 1) {
    EXPECT_TRUE(Bitwise(run.run.losses, reference.losses));
    EXPECT_TRUE(Bitwise(run.run.params, reference.params));
  } else {
    EXPECT_LE(MaxRelativeDifference(run.run.losses, reference.losses), 1e-3);
  }
}

// The trust ratio and the L2 decay inside the update make LAMB a different step from AdamW's at
// the same rate, from the same model and batches.
TEST(LambTrust, StepsDifferentlyFromAdamW) {
  const TrainSettings settings = LambSettings(DType::kF32, /*steps=*/3);
  const OffloadOutcome run = TrainOffload(LambOptions(1, DType::kF32), settings);
  const RunResult adam = RunReference(TinyGpt(), settings, Config().optimizer);
  EXPECT_NEAR(run.run.losses.front(), adam.losses.front(), 1e-5) << "same model, first batch";
  EXPECT_FALSE(Bitwise(run.run.params, adam.params)) << "LAMB stepped as AdamW";
}

TEST(LambMemory, KeepsBothMoments) {
  const TrainSettings settings = LambSettings(DType::kBF16, /*steps=*/1);
  Result<ZeroRig> lamb =
      MakeZeroRig(LambOptions(2, DType::kBF16), TinyGpt(), TestWorld(), settings.seed);
  ASSERT_TRUE(lamb.ok()) << lamb.status().ToString();
  ZeroOptions adam_options = LambOptions(2, DType::kBF16);
  adam_options.optimizer = Config().optimizer;
  Result<ZeroRig> adam = MakeZeroRig(adam_options, TinyGpt(), TestWorld(), settings.seed);
  ASSERT_TRUE(adam.ok()) << adam.status().ToString();
  EXPECT_EQ(lamb->engine->memory().optimizer_state, adam->engine->memory().optimizer_state);
  EXPECT_GT(lamb->engine->memory().optimizer_state, 0u);
}

}  // namespace
}  // namespace sluice::zero::testing
