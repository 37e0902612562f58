// Lion through the trainer on the demo's model (configs/demo_gpt.yaml: a byte-level GPT-2 of 1.3M
// parameters in bf16, here on a synthetic text corpus), its optimizer section swapped for
// DeepSpeed's Lion: the loss falls, with the state on the device and offloaded to host memory at
// stage 2 alike (the same bits: both run the fused CPU Lion kernel over the same elements).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
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

// configs/demo_gpt.yaml with Lion (a third of AdamW's lr, thrice its decay: the paper's advice)
// in place of its AdamW section.
std::string DemoLionYaml() {
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
               "optimizer:\n"
               "  type: Lion\n"
               "  params: {lr: 5.0e-4, betas: [0.9, 0.99], weight_decay: 0.3}\n");
  return yaml;
}

struct Curve {
  std::vector<double> losses;
  std::vector<float> params;
};

Curve Train(const std::vector<std::string>& more) {
  std::vector<std::string> overrides = {
      // A corpus of the test's own: data/demo_corpus.txt exists only after `make run`.
      "data.train_path=" + test_util::WriteFile(test_util::TempPath("corpus.txt"),
                                                test_util::SyntheticCorpus(256 * 1024)),
      "run.dir=" + test_util::TempPath("lion_demo"),
      "run.steps=" + std::to_string(kSteps),
      "run.eval_interval=0",
      "scheduler.params.warmup_num_steps=10",
      "device.threads=2"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  const Config config = test_util::LoadTestConfig(DemoLionYaml(), overrides);
  EXPECT_EQ(config.optimizer.type, OptimizerType::kLion);
  Result<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(config, test_util::QuietTrainerOptions());
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  Curve curve;
  for (int s = 0; s < kSteps; ++s) {
    Result<StepMetrics> m = (*trainer)->TrainStep();
    SLUICE_CHECK(m.ok()) << m.status().ToString();
    curve.losses.push_back(m->loss);
  }
  curve.params.resize(static_cast<size_t>((*trainer)->model().ParameterCount()));
  SLUICE_CHECK((*trainer)->engine().GatherFullParameters(curve.params).ok());
  return curve;
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

TEST(LionTrainTest, DemoModelLossFallsOnTheDeviceAndOffloadedAlike) {
  const Curve device = Train({"zero_optimization.stage=2"});
  ASSERT_EQ(device.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(device.losses.front(), std::log(256.0), 0.3) << "bytes start uniform";
  EXPECT_LT(Mean(device.losses, kSteps - 5, kSteps), Mean(device.losses, 0, 5) - 1.0)
      << "first " << device.losses.front() << " last " << device.losses.back();

  std::printf("Lion on the demo model: loss %.3f -> %.3f (mean of the last 5: %.3f) in %d steps\n",
              device.losses.front(), device.losses.back(), Mean(device.losses, kSteps - 5, kSteps),
              kSteps);

  const Curve offloaded =
      Train({"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"});
  EXPECT_EQ(std::memcmp(offloaded.losses.data(), device.losses.data(),
                        device.losses.size() * sizeof(double)),
            0)
      << "offloaded Lion left the device's curve";
  EXPECT_EQ(std::memcmp(offloaded.params.data(), device.params.data(),
                        device.params.size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace sluice::train
