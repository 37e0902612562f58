// Stage 0 on one rank: a real training step of engine/train (through the ZeRO engine, a world of
// one) on the CPU device, its memory ledger peaks per device category against the estimate of
// the same config.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/config/config.h"
#include "engine/estimate/estimate_compare.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/train/trainer.h"
#include "runtime/memory_accounting.h"

namespace sluice::estimate {
namespace {

class Stage0TrainingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("sluice_estimate_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 400; ++i) {
      text << "Line " << i << ": the quick brown fox jumps over the lazy dog, again and again.\n";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string ConfigText(const std::string& family, const std::string& precision) const {
    std::string text =
        fmt::format(R"(
train_micro_batch_size_per_gpu: 3
gradient_accumulation_steps: 2
optimizer: {{type: adamw, params: {{lr: 1e-3}}}}
model: {}
data: {{train_path: {}, format: text}}
device: {{type: cpu, memory_limit: 256MiB, host_memory_limit: 1GiB, threads: 2}}
run: {{dir: {}, steps: 1, eval_interval: 0}}
)",
                    family == "llama" ? "{family: llama, n_layer: 3, n_head: 4, n_kv_head: 2, "
                                        "d_model: 64, d_ff: 176, vocab_size: 256, seq_len: 64}"
                                      : "{family: gpt2, n_layer: 2, n_head: 4, d_model: 64, "
                                        "d_ff: 256, vocab_size: 256, seq_len: 64}",
                    (dir_ / "corpus.txt").string(), (dir_ / "run").string());
    if (precision == "bf16") text += "bf16: {enabled: true}\n";
    if (precision == "f16") text += "fp16: {enabled: true}\n";
    return text;
  }

  std::filesystem::path dir_;
};

TEST_P(Stage0TrainingTest, DevicePeaksPerCategoryMatchTheEstimate) {
  const std::string family = GetParam().substr(0, GetParam().find('_'));
  const std::string precision = GetParam().substr(GetParam().find('_') + 1);
  ConfigSources sources;
  sources.env.emplace();
  auto config = LoadConfigFromText(ConfigText(family, precision), ConfigFormat::kYaml, sources);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto estimate = EstimateMemory(*config, 1);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  EXPECT_EQ(estimate->precision, precision);

  train::TrainerOptions options;
  options.progress = train::ProgressMode::kOff;
  options.write_files = false;
  options.summary_stream = nullptr;
  auto trainer = train::Trainer::Create(*config, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto step = (*trainer)->TrainStep();  // resets the peaks at its start
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  const MemorySnapshot snapshot = MemoryLedger::Global().Snapshot();

  const std::vector<PeakRow> rows = ComparePeaks(*estimate, snapshot);
  SCOPED_TRACE(FormatPeakComparison(rows));
  for (const PeakRow& row : rows) {
    if (row.tier != MemoryTier::kDevice) continue;
    const std::string what = row.category.has_value()
                                 ? std::string(MemoryCategoryName(*row.category))
                                 : std::string("total");
    ASSERT_GT(row.predicted, 0) << what << " was measured but not predicted";
    EXPECT_NEAR(static_cast<double>(row.measured), static_cast<double>(row.predicted),
                0.10 * static_cast<double>(row.predicted))
        << what;
  }
  // Model states are exact: the fp32 compute copy plus, apart from f32, Ψ elements in the
  // parameter dtype; fp32 gradients; Adam's state.
  const int64_t psi = estimate->parameters;
  EXPECT_EQ(psi, (*trainer)->model().ParameterCount());
  const auto peak = [&](MemoryCategory category) {
    return static_cast<int64_t>(snapshot.at(MemoryTier::kDevice, category).peak);
  };
  const int64_t stored_bytes = precision == "f32" ? 0 : 2;
  const int64_t optimizer_bytes = precision == "f32" ? 8 : 12;
  EXPECT_EQ(estimate->bytes(MemoryTier::kDevice, MemoryCategory::kParams),
            (4 + stored_bytes) * psi);
  EXPECT_EQ(estimate->bytes(MemoryTier::kDevice, MemoryCategory::kGrads), 4 * psi);
  EXPECT_EQ(estimate->bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer),
            optimizer_bytes * psi);
  const auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  EXPECT_EQ(peak(MemoryCategory::kParams), aligned(4 * psi) + aligned(stored_bytes * psi));
  EXPECT_EQ(peak(MemoryCategory::kGrads), aligned(4 * psi));
  EXPECT_EQ(peak(MemoryCategory::kOptimizer), (optimizer_bytes / 4) * aligned(4 * psi));
}

INSTANTIATE_TEST_SUITE_P(Precisions, Stage0TrainingTest,
                         ::testing::Values("gpt2_f32", "gpt2_bf16", "gpt2_f16", "llama_f32",
                                           "llama_bf16"));

}  // namespace
}  // namespace sluice::estimate
