// The trainer on N ranks (mpirun -np 1, 2, 3): stages 0-3 through the ZeRO engine against the
// single-rank run of the same global batches. Each rank also builds the reference itself, on a
// communicator of its own (a world of one) with an N times larger micro-batch: the data loader
// hands the N ranks' slices of a global batch out of one global order, so both see the same
// windows (data_loader.h).
//
// At N = 1 every stage reproduces the stage-0 run bit for bit (one micro-batch per step:
// tests/zero/equivalence_test.cpp says why). For N > 1 each rank's loss and gradient are means
// over its own rows, averaged over the ranks afterwards, where the reference takes one mean over
// all rows: the last bits differ and Adam carries them on, within 1e-6 relative over these steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/check.h"
#include "runtime/comm/comm_factory.h"
#include "tests/common/test_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_util::SameBits;

constexpr double kTolerance = 1e-6;
constexpr int kSteps = 5;

using ::sluice::testing::TestWorld;

using Curve = test_util::TrainedCurve;

// The tiny GPT with its corpus in a file of this rank's own (the ranks write at the same time).
Config RankConfig(int micro_batch, int stage, const std::vector<std::string>& more = {}) {
  const std::string corpus =
      test_util::WriteFile(test_util::TempPath("corpus_rank" + std::to_string(TestWorld().rank())),
                           test_util::SyntheticCorpus(64 * 1024));
  std::vector<std::string> overrides = {
      "train_micro_batch_size_per_gpu=" + std::to_string(micro_batch),
      "zero_optimization.stage=" + std::to_string(stage),
      // Several buckets and gathers per pass, persistent norms and biases at stage 3.
      "zero_optimization.reduce_bucket_size=5000", "zero_optimization.allgather_bucket_size=8000",
      "zero_optimization.stage3_prefetch_bucket_size=6000",
      "zero_optimization.stage3_param_persistence_threshold=64"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return test_util::LoadTestConfig(test_util::TinyGptYaml(corpus, test_util::TempPath("run")),
                                   overrides);
}

Curve Train(const Config& config, Comm& world) {
  TrainerOptions options = test_util::QuietTrainerOptions(&world);
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  return test_util::TrainCurve(**trainer, kSteps);
}

// The single-rank run of the same global batches, on this rank alone.
Curve Reference(const std::vector<std::string>& more = {}) {
  const int n = TestWorld().size();
  Result<std::unique_ptr<Comm>> self = TestWorld().Split(TestWorld().rank(), 0);
  SLUICE_CHECK(self.ok()) << self.status().ToString();
  SLUICE_CHECK_EQ((*self)->size(), 1);
  return Train(RankConfig(2 * n, 0, more), **self);
}

double RelativeDifference(double a, double b) { return std::abs(a - b) / std::abs(b); }

void ExpectMatches(const Curve& run, const Curve& reference, const std::string& what) {
  ASSERT_EQ(run.losses.size(), reference.losses.size());
  EXPECT_EQ(run.tokens, reference.tokens) << what << ": tokens are the global batch's";
  for (size_t i = 0; i < run.losses.size(); ++i) {
    if (TestWorld().size() == 1) {
      EXPECT_TRUE(SameBits(run.losses[i], reference.losses[i])) << what << ", step " << i + 1;
      EXPECT_TRUE(SameBits(run.grad_norms[i], reference.grad_norms[i]))
          << what << ", step " << i + 1;
    } else {
      EXPECT_LE(RelativeDifference(run.losses[i], reference.losses[i]), kTolerance)
          << what << ", step " << i + 1 << ": " << run.losses[i] << " vs " << reference.losses[i];
    }
  }
  if (TestWorld().size() == 1) {
    EXPECT_TRUE(SameBits(run.val_loss, reference.val_loss)) << what;
  } else {
    EXPECT_LE(RelativeDifference(run.val_loss, reference.val_loss), kTolerance) << what;
  }
  EXPECT_LT(run.losses.back(), run.losses.front()) << what << ": the tiny GPT should learn";
}

class TrainerRanksTest : public ::testing::TestWithParam<int> {};

TEST_P(TrainerRanksTest, LossesMatchTheSingleRankRun) {
  const int stage = GetParam();
  const Curve reference = Reference();
  const Curve run = Train(RankConfig(2, stage), TestWorld());
  ExpectMatches(
      run, reference,
      "stage " + std::to_string(stage) + " on " + std::to_string(TestWorld().size()) + " rank(s)");
}

TEST_P(TrainerRanksTest, Bf16LossesMatchTheSingleRankRun) {
  const int stage = GetParam();
  const Curve reference = Reference({"bf16.enabled=true"});
  const Curve run = Train(RankConfig(2, stage, {"bf16.enabled=true"}), TestWorld());
  ExpectMatches(run, reference,
                "bf16, stage " + std::to_string(stage) + " on " +
                    std::to_string(TestWorld().size()) + " rank(s)");
}

INSTANTIATE_TEST_SUITE_P(Stages, TrainerRanksTest, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

// fp16 with a scale that overflows at first: every rank skips the same steps (the overflow is
// agreed over the ranks) and the scaler follows the same sequence as on one rank.
TEST(TrainerRanksFp16Test, OverflowSkipsTheSameStepsOnEveryRank) {
  const std::vector<std::string> fp16 = {"fp16.enabled=true", "fp16.initial_scale_power=24",
                                         "fp16.hysteresis=1"};
  TrainerOptions options = test_util::QuietTrainerOptions(&TestWorld());
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(RankConfig(2, 2, fp16), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  std::vector<uint64_t> skipped_mask;
  int skipped = 0;
  for (int s = 0; s < 12; ++s) {
    Result<StepMetrics> m = (*trainer)->TrainStep();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    if (m->skipped) ++skipped;
    skipped_mask.push_back(m->skipped ? 1 : 0);
  }
  EXPECT_GE(skipped, 1) << "2^24 should overflow fp16 at first";
  EXPECT_LT(skipped, 12);
  EXPECT_EQ((*trainer)->optimizer().step(), 12 - skipped);
  // Every rank saw the same sequence.
  std::vector<float> mine(skipped_mask.begin(), skipped_mask.end());
  std::vector<float> all(mine.size() * TestWorld().size());
  ASSERT_TRUE(TestWorld().AllGather(mine.data(), all.data(), all.size(), DType::kF32).ok());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], mine[i % mine.size()]) << i;
}

}  // namespace
}  // namespace sluice::train
