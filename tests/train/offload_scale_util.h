// Shared by offload_scale_test.cpp (quick) and offload_scale_slow_test.cpp (label slow).
//
// Training a model many times larger than the device (issue 7): the shipped configs
// configs/zero3_offload_32x.yaml and zero3_offload_100x.yaml train for a few steps with the
// measured peak of device memory (set-up, steps, everything the ledger saw) within
// device.memory_limit, while the training state the engine holds on all tiers (parameter,
// gradient and optimizer shards: bf16 parameters, fp32 gradients, fp32 master weights, exp_avg
// and exp_avg_sq) is at least 32 (100) times that budget.
//
// The full-size runs take 30-60 s on two cores (label slow: train_offload_scale_slow_test); the
// quick test trains the 32x config shrunk to d_model 128 under a 4 MiB budget, still >= 32x.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/check.h"
#include "runtime/memory_accounting.h"
#include "tests/train/train_test_util.h"

namespace sluice::train::test_util {

struct ScaleRun {
  TrainSummary summary;
  zero::ZeroMemory memory;
  int64_t parameters = 0;
  uint64_t device_budget = 0;
};

inline Config ShippedConfig(const std::string& name, std::vector<std::string> overrides) {
  const std::string source = SLUICE_SOURCE_DIR;
  ConfigSources sources;
  sources.env.emplace();
  sources.paths = {source + "/configs/" + name};
  const std::string swap = TempPath("swap");
  std::filesystem::create_directories(swap);
  // The shipped configs read the demo corpus that `make run` assembles; the tests must not depend
  // on it having run, so they train on a synthetic text of the same kind.
  const std::string corpus = WriteFile(TempPath("corpus.txt"), SyntheticCorpus(1 << 20));
  overrides.insert(overrides.begin(), {"data.train_path=" + corpus, "run.dir=" + TempPath("run")});
  sources.set_overrides = overrides;
  Result<Config> config = LoadConfig(sources);
  SLUICE_CHECK(config.ok()) << config.status().ToString();
  if (config->zero.offload_optimizer.device == OffloadDevice::kNvme) {
    config->zero.offload_optimizer.nvme_path = swap;
  }
  if (config->zero.offload_param.device == OffloadDevice::kNvme) {
    config->zero.offload_param.nvme_path = swap;
  }
  return std::move(config).value();
}

inline ScaleRun TrainScaleRun(const Config& config) {
  TrainerOptions options = test_util::QuietTrainerOptions();
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  Result<TrainSummary> summary = (*trainer)->Run();
  SLUICE_CHECK(summary.ok()) << summary.status().ToString();
  ScaleRun run;
  run.summary = std::move(summary).value();
  run.memory = (*trainer)->zero().memory();
  run.parameters = (*trainer)->model().ParameterCount();
  run.device_budget = static_cast<uint64_t>(*config.device.memory_limit);
  return run;
}

// Parameters, gradients, master weights and Adam moments, on every tier.
inline uint64_t TrainingStateBytes(const zero::ZeroMemory& m) {
  return m.param_shard + m.host_param_shard + m.param_nvme + m.grad_shard + m.host_grad_shard +
         m.optimizer_state + m.optimizer_host + m.optimizer_nvme;
}

inline void ExpectTrainsAtRatio(const ScaleRun& run, double min_ratio) {
  EXPECT_GT(run.summary.steps, 0);
  EXPECT_EQ(run.summary.skipped_steps, 0);
  EXPECT_TRUE(std::isfinite(run.summary.final_train_loss));
  const uint64_t device_peak = run.summary.peak_bytes[static_cast<int>(MemoryTier::kDevice)];
  EXPECT_GT(device_peak, 0u);
  EXPECT_LE(device_peak, run.device_budget) << "the device budget is hard";
  const uint64_t state = TrainingStateBytes(run.memory);
  // bf16 parameters (2 B), fp32 gradients (4 B), fp32 master, exp_avg, exp_avg_sq (12 B): the
  // ledger-backed sizes are at least that (NVMe extents round up to blocks).
  EXPECT_GE(state, static_cast<uint64_t>(run.parameters) * 18);
  const double ratio = static_cast<double>(state) / static_cast<double>(run.device_budget);
  EXPECT_GE(ratio, min_ratio) << state << " bytes of state, device budget " << run.device_budget;
  // Nothing of the state is on the device.
  EXPECT_EQ(run.memory.param_shard + run.memory.grad_shard + run.memory.optimizer_state, 0u);
  std::printf(
      "%lld parameters, state %.1f MiB on host/NVMe, device budget %.1f MiB, peak %.2f "
      "MiB: state/budget = %.1fx\n",
      static_cast<long long>(run.parameters), static_cast<double>(state) / (1 << 20),
      static_cast<double>(run.device_budget) / (1 << 20),
      static_cast<double>(device_peak) / (1 << 20), ratio);
}

}  // namespace sluice::train::test_util
