// The demo's model (configs/demo_gpt.yaml) trained for a few dozen steps with its optimizer
// section swapped for another: shared by the Lion and Lamb train tests, which differ only in the
// section and what they compare. Its own header because it reads SLUICE_SOURCE_DIR, which only
// those tests' targets define.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/check.h"
#include "tests/train/train_test_util.h"

namespace sluice::train::test_util {

// configs/demo_gpt.yaml with `optimizer_section` (YAML text ending in a newline, "optimizer:"
// included) in place of its AdamW section; "" (and a test failure) when that section changed.
inline std::string DemoYamlWithOptimizer(const std::string& optimizer_section) {
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
  yaml.replace(at, adamw.size(), optimizer_section);
  return yaml;
}

// What a demo run gave: the loss of every step and, when asked for, the full parameters after
// the last.
struct DemoCurve {
  std::vector<double> losses;
  std::vector<float> params;
};

// `steps` steps of DemoYamlWithOptimizer(optimizer_section) on a 256 KiB synthetic corpus of the
// test's own (data/demo_corpus.txt exists only after `make run`), two threads, no evaluation,
// run files under a temporary `run_name`; `more` are further --set items. Any error aborts: the
// callers compare whole curves.
inline DemoCurve TrainDemo(const std::string& optimizer_section, OptimizerType expected_type,
                           const std::string& run_name, int steps,
                           const std::vector<std::string>& more, bool gather_params) {
  std::vector<std::string> overrides = {
      "data.train_path=" + WriteFile(TempPath("corpus.txt"), SyntheticCorpus(256 * 1024)),
      "run.dir=" + TempPath(run_name),
      "run.steps=" + std::to_string(steps),
      "run.eval_interval=0",
      "scheduler.params.warmup_num_steps=10",
      "device.threads=2"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  const Config config = LoadTestConfig(DemoYamlWithOptimizer(optimizer_section), overrides);
  EXPECT_EQ(config.optimizer.type, expected_type);
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, QuietTrainerOptions());
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  DemoCurve curve;
  for (int s = 0; s < steps; ++s) {
    Result<StepMetrics> m = (*trainer)->TrainStep();
    SLUICE_CHECK(m.ok()) << m.status().ToString();
    curve.losses.push_back(m->loss);
  }
  if (gather_params) {
    curve.params.resize(static_cast<size_t>((*trainer)->model().ParameterCount()));
    SLUICE_CHECK((*trainer)->zero().GatherFullParameters(curve.params).ok());
  }
  return curve;
}

// The mean of v[begin, end).
inline double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

}  // namespace sluice::train::test_util
