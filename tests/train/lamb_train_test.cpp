// LAMB through the trainer on the demo's model (configs/demo_gpt.yaml: a byte-level GPT-2 of 1.3M
// parameters in bf16, here on a synthetic text corpus), its optimizer section swapped for
// DeepSpeed's Lamb (zero_allow_untested_optimizer true, as DeepSpeed requires at stages 1-3): the
// loss falls at stage 0 and at stage 2, and the two runs stay within rounding of each other on one
// rank (the same pieces, each parameter whole).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/check.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

constexpr int kSteps = 40;

// configs/demo_gpt.yaml with Lamb in place of its AdamW section, at DeepSpeed's default trust-ratio
// clamp: its small initial weights start at min_coeff, so the rate is higher than AdamW's.
std::string DemoLambYaml() {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/configs/demo_gpt.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string adamw =
      "optimizer:\n"
      "  type: AdamW\n"
      "  params:\n"
      "    lr: 1.5e-3\n"
      "    betas: [0.9, 0.99]\n"
      "    eps: 1.0e-8\n"
      "    weight_decay: 0.1\n";
  const size_t at = yaml.find(adamw);
  EXPECT_NE(at, std::string::npos) << "configs/demo_gpt.yaml's optimizer section changed";
  if (at == std::string::npos) return "";
  yaml.replace(at, adamw.size(),
               "zero_allow_untested_optimizer: true\n"
               "optimizer:\n"
               "  type: Lamb\n"
               "  params: {lr: 5.0e-2, betas: [0.9, 0.999], eps: 1.0e-6, weight_decay: 0.01,\n"
               "           max_coeff: 10.0, min_coeff: 0.01}\n");
  return yaml;
}

std::vector<double> Train(const std::vector<std::string>& more) {
  std::vector<std::string> overrides = {
      // A corpus of the test's own: data/demo_corpus.txt exists only after `make run`.
      "data.train_path=" + test_util::WriteFile(test_util::TempPath("corpus.txt"),
                                                test_util::SyntheticCorpus(256 * 1024)),
      "run.dir=" + test_util::TempPath("lamb_demo"),
      "run.steps=" + std::to_string(kSteps),
      "run.eval_interval=0",
      "scheduler.params.warmup_num_steps=10",
      "device.threads=2"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  const Config config = test_util::LoadTestConfig(DemoLambYaml(), overrides);
  EXPECT_EQ(config.optimizer.type, OptimizerType::kLamb);
  Result<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(config, test_util::QuietTrainerOptions());
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    Result<StepMetrics> m = (*trainer)->TrainStep();
    SLUICE_CHECK(m.ok()) << m.status().ToString();
    losses.push_back(m->loss);
  }
  return losses;
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

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
