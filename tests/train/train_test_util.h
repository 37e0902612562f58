// Tiny training runs for the engine/train tests: a deterministic corpus written into the test's
// temporary directory and configs built from YAML text with an empty environment, so nothing
// outside the test changes a result.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "runtime/check.h"

namespace sluice::train::test_util {

// Sentences drawn from a small vocabulary by a fixed linear congruential generator: English-like
// text with learnable structure, the same bytes on every machine.
inline std::string SyntheticCorpus(size_t bytes, uint32_t seed = 12345) {
  static const char* kWords[] = {
      "the",   "model", "learns", "to",     "predict", "next",  "byte",   "of",   "text",
      "and",   "loss",  "falls",  "while",  "weights", "move",  "slowly", "down", "a",
      "hill",  "each",  "step",   "reads",  "batch",   "from",  "corpus", "with", "care",
      "under", "fixed", "seed",   "always", "same",    "curve", "result"};
  constexpr uint32_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  std::string text;
  uint32_t state = seed;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  while (text.size() < bytes) {
    const uint32_t length = 4 + next() % 8;
    for (uint32_t w = 0; w < length; ++w) {
      std::string word = kWords[next() % kNumWords];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
      text += w + 1 < length ? " " : ".\n";
    }
  }
  text.resize(bytes);
  return text;
}

inline std::string TempPath(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string path =
      std::string("sluice_train_") + info->test_suite_name() + "_" + info->name() + "_" + name;
  for (char& c : path) {
    if (c == '/') c = '_';  // parameterized tests are named Prefix/Suite.Test/param
  }
  return ::testing::TempDir() + path;
}

inline std::string WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// A 2-layer GPT-2 (d_model 32, seq_len 32, bytes) on a 64 KiB synthetic corpus, one thread,
// f32, constant-after-warm-up AdamW: the golden-curve model. Its products run on the
// deterministic GEMM (device.cpu_gemm), so its curve, and every comparison of two runs, is the
// same on any x86-64 CPU whatever kernel OpenBLAS would pick. `overrides` are --set items.
inline std::string TinyGptYaml(const std::string& corpus, const std::string& run_dir) {
  return "train_micro_batch_size_per_gpu: 4\n"
         "gradient_accumulation_steps: 1\n"
         "gradient_clipping: 1.0\n"
         "optimizer:\n"
         "  type: AdamW\n"
         "  params: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.01}\n"
         "scheduler:\n"
         "  type: WarmupLR\n"
         "  params: {warmup_min_lr: 0, warmup_max_lr: 3.0e-3, warmup_num_steps: 4, "
         "warmup_type: linear}\n"
         "model: {family: gpt2, n_layer: 2, n_head: 2, d_model: 32, seq_len: 32, "
         "vocab_size: 256}\n"
         "data: {train_path: " +
         corpus +
         ", format: text, val_fraction: 0.1, seed: 7, eval_batches: 2}\n"
         "device: {type: cpu, memory_limit: 64MiB, host_memory_limit: 1GiB, threads: 1, "
         "cpu_gemm: deterministic}\n"
         "run: {dir: " +
         run_dir + ", steps: 20, seed: 1234, eval_interval: 10, log_interval: 5}\n";
}

// `yaml` (TinyGptYaml's) with its AdamW section replaced by Lion's (lr 1e-3, betas [0.9, 0.99],
// weight decay 0.1, warming up to that lr): Lion takes no eps, so an override cannot make it.
inline std::string WithLionOptimizer(std::string yaml) {
  const std::string adam =
      "  type: AdamW\n"
      "  params: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.01}\n";
  const std::string warmup = "warmup_max_lr: 3.0e-3";
  const size_t at = yaml.find(adam);
  const size_t warmup_at = yaml.find(warmup);
  SLUICE_CHECK(at != std::string::npos && warmup_at != std::string::npos)
      << "not TinyGptYaml's optimizer and scheduler";
  yaml.replace(warmup_at, warmup.size(), "warmup_max_lr: 1.0e-3");
  yaml.replace(yaml.find(adam), adam.size(),
               "  type: Lion\n  params: {lr: 1.0e-3, betas: [0.9, 0.99], weight_decay: 0.1}\n");
  return yaml;
}

// TinyGptYaml with DeepSpeed's Lamb in place of its AdamW (zero_allow_untested_optimizer true, as
// DeepSpeed and Sluice require for Lamb at ZeRO stages 1-3).
inline std::string WithLambOptimizer(std::string yaml) {
  const std::string adam =
      "  type: AdamW\n"
      "  params: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.01}\n";
  const size_t at = yaml.find(adam);
  SLUICE_CHECK(at != std::string::npos) << "not TinyGptYaml's optimizer";
  yaml.replace(at, adam.size(),
               "  type: Lamb\n  params: {lr: 3.0e-3, betas: [0.9, 0.999], eps: 1.0e-6, "
               "weight_decay: 0.01}\n");
  return "zero_allow_untested_optimizer: true\n" + yaml;
}

inline Config LoadTestConfig(const std::string& yaml, const std::vector<std::string>& overrides) {
  ConfigSources sources;
  sources.env.emplace();
  sources.set_overrides = overrides;
  Result<Config> config = LoadConfigFromText(yaml, ConfigFormat::kYaml, sources);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? std::move(config).value() : Config();
}

// The tiny GPT config with its corpus written under the test's temporary directory.
inline Config TinyGptConfig(const std::vector<std::string>& overrides = {}) {
  const std::string corpus = WriteFile(TempPath("corpus.txt"), SyntheticCorpus(64 * 1024));
  return LoadTestConfig(TinyGptYaml(corpus, TempPath("run")), overrides);
}

// A trainer that prints nothing and writes no run files (metrics, summary, config record); on
// `world` when given, else a world of one.
inline TrainerOptions QuietTrainerOptions(Comm* world = nullptr) {
  TrainerOptions options;
  options.world = world;
  options.progress = ProgressMode::kOff;
  options.summary_stream = nullptr;
  options.write_files = false;
  return options;
}

// What a short run gave, step by step, and the validation loss after its last step.
struct TrainedCurve {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<int64_t> tokens;
  double val_loss = 0.0;
};

// `steps` optimizer steps, then one evaluation. Any error aborts: the callers compare whole
// curves, so a partial one is of no use.
inline TrainedCurve TrainCurve(Trainer& trainer, int steps) {
  TrainedCurve curve;
  for (int s = 0; s < steps; ++s) {
    Result<StepMetrics> m = trainer.TrainStep();
    SLUICE_CHECK(m.ok()) << m.status().ToString();
    curve.losses.push_back(m->loss);
    curve.grad_norms.push_back(m->grad_norm);
    curve.tokens.push_back(m->tokens);
  }
  Result<double> val = trainer.Evaluate();
  SLUICE_CHECK(val.ok()) << val.status().ToString();
  curve.val_loss = *val;
  return curve;
}

inline bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

}  // namespace sluice::train::test_util
