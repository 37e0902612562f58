// Activation checkpointing from the config (model.activation_checkpointing and DeepSpeed's
// activation_checkpointing section) in a real training step of engine/train: the memory ledger's
// device and host-pinned peaks per category against the estimate of the same config, and the
// device's activation peak falling with checkpointing and again with cpu_checkpointing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/estimate_compare.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/train/trainer.h"
#include "runtime/memory_accounting.h"

namespace sluice::estimate {
namespace {

class CheckpointingTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice_ckpt_estimate_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 400; ++i) {
      text << "Line " << i << ": the quick brown fox jumps over the lazy dog, again and again.\n";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A 6-block gpt2 whose blocks are large against its head, so that the kept inputs matter.
  std::string ConfigText() const {
    return fmt::format(R"(
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 2
optimizer: {{type: adamw, params: {{lr: 1e-3}}}}
model: {{family: gpt2, n_layer: 6, n_head: 4, d_model: 64, d_ff: 256, vocab_size: 256,
        seq_len: 64}}
data: {{train_path: {}, format: text}}
device: {{type: cpu, memory_limit: 256MiB, host_memory_limit: 1GiB, threads: 2}}
run: {{dir: {}, steps: 1, eval_interval: 0}}
)",
                       (dir_ / "corpus.txt").string(), (dir_ / "run").string());
  }

  // One training step with the `checkpointing` overrides (--set items); the ledger's peaks
  // against the estimate (device and host_pinned rows). Returns the measured device activation
  // peak.
  int64_t TrainAndCompare(const std::vector<std::string>& checkpointing,
                          int64_t* pinned_activations) {
    ConfigSources sources;
    sources.env.emplace();
    sources.set_overrides = checkpointing;
    auto config = LoadConfigFromText(ConfigText(), ConfigFormat::kYaml, sources);
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    if (!config.ok()) return 0;
    auto estimate = EstimateMemory(*config, 1);
    EXPECT_TRUE(estimate.ok()) << estimate.status().ToString();
    if (!estimate.ok()) return 0;

    train::TrainerOptions options;
    options.progress = train::ProgressMode::kOff;
    options.write_files = false;
    options.summary_stream = nullptr;
    auto trainer = train::Trainer::Create(*config, options);
    EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
    if (!trainer.ok()) return 0;
    auto step = (*trainer)->TrainStep();  // resets the peaks at its start
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    const MemorySnapshot snapshot = MemoryLedger::Global().Snapshot();

    const std::vector<PeakRow> rows = ComparePeaks(*estimate, snapshot);
    SCOPED_TRACE(FormatPeakComparison(rows));
    for (const PeakRow& row : rows) {
      if (row.tier != MemoryTier::kDevice && row.tier != MemoryTier::kHostPinned) continue;
      const std::string what =
          std::string(MemoryTierName(row.tier)) + " " +
          (row.category.has_value() ? std::string(MemoryCategoryName(*row.category))
                                    : std::string("total"));
      EXPECT_GT(row.predicted, 0) << what << " was measured but not predicted";
      EXPECT_NEAR(static_cast<double>(row.measured), static_cast<double>(row.predicted),
                  0.10 * static_cast<double>(row.predicted))
          << what;
    }
    *pinned_activations = estimate->bytes(MemoryTier::kHostPinned, MemoryCategory::kActivations);
    return static_cast<int64_t>(
        snapshot.at(MemoryTier::kDevice, MemoryCategory::kActivations).peak);
  }

  std::filesystem::path dir_;
};

TEST_F(CheckpointingTrainingTest, PeaksMatchTheEstimateAndFallWithEachSetting) {
  std::map<std::string, int64_t> device;
  std::map<std::string, int64_t> pinned;
  const std::string on = "model.activation_checkpointing=true";
  const std::map<std::string, std::vector<std::string>> settings = {
      {"plain", {}},
      {"section_only", {"activation_checkpointing.cpu_checkpointing=true"}},
      {"all", {on}},
      {"first3", {on, "activation_checkpointing.number_checkpoints=3"}},
      {"host", {on, "activation_checkpointing.cpu_checkpointing=true"}},
      {"host_contiguous",
       {on, "activation_checkpointing.cpu_checkpointing=true",
        "activation_checkpointing.contiguous_memory_optimization=true"}},
      {"contiguous", {on, "activation_checkpointing.contiguous_memory_optimization=true"}},
  };
  for (const auto& [name, overrides] : settings) {
    SCOPED_TRACE(name);
    device[name] = TrainAndCompare(overrides, &pinned[name]);
  }
  // The section alone changes nothing (model.activation_checkpointing is off).
  EXPECT_EQ(device["section_only"], device["plain"]);
  EXPECT_EQ(pinned["section_only"], 0);
  EXPECT_LT(device["first3"], device["plain"]);
  EXPECT_LT(device["all"], device["first3"]);
  EXPECT_LT(device["host"], device["all"]);
  EXPECT_EQ(device["host_contiguous"], device["host"]);
  // The contiguous device buffer holds a copy of the first block's input too.
  EXPECT_GT(device["contiguous"], device["all"]);
  // Six block inputs of 4 x 64 tokens x 64 fp32 in pinned memory.
  EXPECT_EQ(pinned["host"], 6 * 4 * 64 * 64 * 4);
  EXPECT_EQ(pinned["host_contiguous"], pinned["host"]);
  EXPECT_EQ(pinned["all"], 0);
}

}  // namespace
}  // namespace sluice::estimate
