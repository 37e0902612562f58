// Bit-exact resume through the trainer on 1 and 2 ranks (mpirun -np 1, 2), ZeRO stages 0-3 in
// f32 and bf16: run A trains 6 steps straight; run B trains 4 steps saving at 3 and 4, then
// resumes from step 3 and goes on to 6. B's metrics.jsonl must read exactly as A's (step 4 is
// trained twice, and its first record dropped), and the final parameters and Adam step counts
// must be identical bit for bit. A checkpoint with a bit flipped, a file truncated, a shard file of
// another step or an edited manifest field is refused on every rank, naming the file (and the
// field).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/check.h"
#include "runtime/comm/comm_factory.h"
#include "tests/common/test_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;

using ::sluice::testing::TestWorld;

// In `more`: train with Lion (test_util::WithLionOptimizer) instead of AdamW.
constexpr const char* kLion = "optimizer.type=Lion";
// In `more`: train with Lamb (test_util::WithLambOptimizer) instead of AdamW.
constexpr const char* kLamb = "optimizer.type=Lamb";

// The tiny GPT (2 sequences per rank), its corpus in a file of this rank's own, evaluating every
// 3 steps, saving every 3 steps and at the end.
Config ResumeConfig(const std::string& run_dir, int stage, std::vector<std::string> more) {
  const auto lion = std::find(more.begin(), more.end(), std::string(kLion));
  const bool with_lion = lion != more.end();
  if (with_lion) more.erase(lion);
  const auto lamb = std::find(more.begin(), more.end(), std::string(kLamb));
  const bool with_lamb = lamb != more.end();
  if (with_lamb) more.erase(lamb);
  const std::string corpus =
      test_util::WriteFile(test_util::TempPath("corpus_rank" + std::to_string(TestWorld().rank())),
                           test_util::SyntheticCorpus(64 * 1024));
  std::vector<std::string> overrides = {"train_micro_batch_size_per_gpu=2",
                                        "zero_optimization.stage=" + std::to_string(stage),
                                        "zero_optimization.reduce_bucket_size=5000",
                                        "zero_optimization.allgather_bucket_size=8000",
                                        "zero_optimization.stage3_prefetch_bucket_size=6000",
                                        "zero_optimization.stage3_param_persistence_threshold=64",
                                        "run.eval_interval=3",
                                        "checkpoint.save_interval=3"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  std::string yaml = test_util::TinyGptYaml(corpus, run_dir);
  if (with_lion) yaml = test_util::WithLionOptimizer(std::move(yaml));
  if (with_lamb) yaml = test_util::WithLambOptimizer(std::move(yaml));
  return test_util::LoadTestConfig(yaml, overrides);
}

// A fresh directory for this test on every rank.
std::string FreshDir(const std::string& name) {
  const std::string dir = test_util::TempPath(name);
  if (TestWorld().rank() == 0) fs::remove_all(dir);
  SLUICE_CHECK(TestWorld().Barrier().ok());
  return dir;
}

struct RunOutcome {
  std::vector<float> params;
  int64_t optimizer_step = 0;
};

RunOutcome RunTrainer(const Config& config, std::optional<std::string> resume = std::nullopt) {
  TrainerOptions options;
  options.world = &TestWorld();
  options.progress = ProgressMode::kOff;
  options.summary_stream = nullptr;
  options.resume = std::move(resume);
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  Result<TrainSummary> summary = (*trainer)->Run();
  SLUICE_CHECK(summary.ok()) << summary.status().ToString();
  RunOutcome outcome;
  outcome.params.resize(static_cast<size_t>((*trainer)->model().ParameterCount()));
  SLUICE_CHECK((*trainer)->zero().GatherFullParameters(outcome.params).ok());
  outcome.optimizer_step = (*trainer)->optimizer().step();
  return outcome;
}

std::vector<nlohmann::json> ReadMetrics(const std::string& run_dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// What must not differ between a straight and a resumed run (not the timings).
constexpr const char* kExactKeys[] = {"step",      "loss",         "lr",
                                      "grad_norm", "skipped",      "loss_scale",
                                      "tokens",    "total_tokens", "val_loss"};

// stage, and a variant: the precision ("f32", "bf16"), then optionally where the optimizer state
// ("_adam_cpu", "_adam_nvme"; Lion's: "_lion", "_lion_cpu", "_lion_nvme") and the parameter shard
// ("_params_cpu", "_params_nvme") live.
using Case = std::tuple<int, std::string>;

class ResumeTest : public ::testing::TestWithParam<Case> {
 protected:
  std::vector<std::string> Precision() const {
    const std::string& v = std::get<1>(GetParam());
    std::vector<std::string> overrides;
    if (v.starts_with("bf16")) overrides.push_back("bf16.enabled=true");
    if (v.find("_lion") != std::string::npos) overrides.push_back(kLion);
    if (v.find("_lamb") != std::string::npos) overrides.push_back(kLamb);
    if (v.find("_adam_cpu") != std::string::npos || v.find("_lion_cpu") != std::string::npos) {
      overrides.push_back("zero_optimization.offload_optimizer.device=cpu");
    }
    // Each rank's swap files are its own (rank in the name): the ranks may share the folder.
    const std::string swap = test_util::TempPath("swap");
    if (v.find("_adam_nvme") != std::string::npos || v.find("_lion_nvme") != std::string::npos) {
      overrides.push_back("zero_optimization.offload_optimizer.device=nvme");
      overrides.push_back("zero_optimization.offload_optimizer.nvme_path=" + swap);
    }
    if (v.find("_params_cpu") != std::string::npos) {
      overrides.push_back("zero_optimization.offload_param.device=cpu");
    }
    if (v.find("_params_nvme") != std::string::npos) {
      overrides.push_back("zero_optimization.offload_param.device=nvme");
      overrides.push_back("zero_optimization.offload_param.nvme_path=" + swap);
      overrides.push_back("zero_optimization.offload_param.max_in_cpu=0");
    }
    return overrides;
  }
};

TEST_P(ResumeTest, ResumedRunMatchesTheStraightRunBitForBit) {
  const int stage = std::get<0>(GetParam());
  const std::string straight_dir = FreshDir("straight");
  const std::string resumed_dir = FreshDir("resumed");

  std::vector<std::string> more = Precision();
  more.push_back("run.steps=6");
  const RunOutcome straight = RunTrainer(ResumeConfig(straight_dir, stage, more));

  std::vector<std::string> first_part = Precision();
  first_part.push_back("run.steps=4");
  RunTrainer(ResumeConfig(resumed_dir, stage, first_part));
  ASSERT_TRUE(fs::exists(resumed_dir + "/checkpoints/step_3/manifest.json"));
  ASSERT_TRUE(fs::exists(resumed_dir + "/checkpoints/step_4/manifest.json"));
  const RunOutcome resumed =
      RunTrainer(ResumeConfig(resumed_dir, stage, more), resumed_dir + "/checkpoints/step_3");

  EXPECT_EQ(resumed.optimizer_step, straight.optimizer_step);
  ASSERT_EQ(resumed.params.size(), straight.params.size());
  EXPECT_EQ(std::memcmp(resumed.params.data(), straight.params.data(),
                        straight.params.size() * sizeof(float)),
            0)
      << "the final parameters differ";
  if (TestWorld().rank() != 0) return;
  const std::vector<nlohmann::json> a = ReadMetrics(straight_dir);
  const std::vector<nlohmann::json> b = ReadMetrics(resumed_dir);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u) << "steps 1-3, then 4-6 once each";
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key : kExactKeys) {
      EXPECT_EQ(a[i].contains(key), b[i].contains(key)) << key << " at line " << i + 1;
      if (a[i].contains(key)) {
        // The JSON text of a double round-trips it exactly: equal text, equal bits.
        EXPECT_EQ(a[i][key].dump(), b[i][key].dump()) << key << " at step " << i + 1;
      }
    }
  }
  EXPECT_TRUE(fs::exists(resumed_dir + "/checkpoints/step_6/manifest.json"));
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return "stage" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
}

INSTANTIATE_TEST_SUITE_P(StagesAndPrecisions, ResumeTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values("f32", "bf16")),
                         CaseName);

// With the optimizer state in host memory or on NVMe, and the parameter shard in host memory or
// on NVMe: the checkpoint holds the same state (streamed from the swap store on save), so the
// resumed run matches bit for bit too.
INSTANTIATE_TEST_SUITE_P(Offload, ResumeTest,
                         ::testing::Values(Case{2, "bf16_adam_cpu"}, Case{3, "f32_adam_nvme"},
                                           Case{3, "bf16_adam_nvme_params_cpu"},
                                           Case{3, "bf16_adam_cpu_params_nvme"},
                                           Case{3, "f32_adam_nvme_params_nvme"}),
                         CaseName);

// Lion: the checkpoint holds master weights and exp_avg only, and resumes as exactly.
INSTANTIATE_TEST_SUITE_P(Lion, ResumeTest,
                         ::testing::Values(Case{0, "f32_lion"}, Case{1, "bf16_lion"},
                                           Case{2, "f32_lion_cpu"}, Case{3, "bf16_lion"},
                                           Case{3, "bf16_lion_nvme_params_cpu"}),
                         CaseName);

// Lamb: both moments, the step count for the bias correction, and the per-parameter trust ratios
// recomputed from them: resumes as exactly.
INSTANTIATE_TEST_SUITE_P(Lamb, ResumeTest,
                         ::testing::Values(Case{0, "f32_lamb"}, Case{1, "bf16_lamb"},
                                           Case{2, "f32_lamb"}, Case{3, "bf16_lamb"}),
                         CaseName);

// Saves a 3-step stage-3 checkpoint and damages it with `damage` (rank 0, on the checkpoint
// directory); resuming must fail on every rank, and rank 0's error must name `file` (and
// `also_named`). `first_run`: more settings of the run that saves it.
void ExpectResumeRefused(const std::function<void(const fs::path&)>& damage,
                         const std::string& file, const std::string& what,
                         const std::string& also_named = "",
                         const std::vector<std::string>& first_run = {}) {
  const std::string dir = FreshDir("run");
  std::vector<std::string> overrides = {"run.steps=3"};
  overrides.insert(overrides.end(), first_run.begin(), first_run.end());
  RunTrainer(ResumeConfig(dir, 3, overrides));
  const fs::path step_dir = fs::path(dir) / "checkpoints" / "step_3";
  if (TestWorld().rank() == 0) damage(step_dir);
  ASSERT_TRUE(TestWorld().Barrier().ok());

  TrainerOptions options = test_util::QuietTrainerOptions(&TestWorld());
  options.resume = "latest";
  Result<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(ResumeConfig(dir, 3, {"run.steps=6"}), options);
  ASSERT_FALSE(trainer.ok()) << what << " was not detected";
  if (TestWorld().rank() == 0) {
    const std::string message = trainer.status().ToString();
    EXPECT_NE(message.find((step_dir / file).string()), std::string::npos) << message;
    EXPECT_NE(message.find(also_named), std::string::npos) << message;
    EXPECT_EQ(trainer.status().code(), StatusCode::kDataLoss) << message;
  }
}

TEST(ResumeFaultTest, BitFlippedWeightsShardIsRefusedNamingTheFile) {
  ExpectResumeRefused(
      [](const fs::path& step_dir) {
        // The last byte is the data of the last tensor rank 0 holds, which it reads on resume.
        std::fstream f(step_dir / "weights.rank00000.bin",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-1, std::ios::end);
        char c = 0;
        f.read(&c, 1);
        c = static_cast<char>(c ^ 0x10);
        f.seekp(-1, std::ios::end);
        f.write(&c, 1);
      },
      "weights.rank00000.bin", "a flipped bit");
}

// The manifest is as protected as the data: an edited field stops every rank, naming it.
TEST(ResumeFaultTest, EditedManifestFieldIsRefusedNamingIt) {
  ExpectResumeRefused(
      [](const fs::path& step_dir) {
        const fs::path path = step_dir / "manifest.json";
        nlohmann::ordered_json manifest = nlohmann::ordered_json::parse(std::ifstream(path));
        manifest["states"]["data_loader"]["position"] =
            manifest["states"]["data_loader"]["position"].get<int64_t>() + 2;
        std::ofstream(path, std::ios::trunc) << manifest.dump(2);
      },
      "manifest.json", "an edited data position", "field 'states.data_loader.position'");
}

// A shard file of another step of the same run (the same size) is not this checkpoint's.
TEST(ResumeFaultTest, ShardFromAnotherStepIsRefusedNamingTheFile) {
  ExpectResumeRefused(
      [](const fs::path& step_dir) {
        fs::copy_file(step_dir.parent_path() / "step_2" / "weights.rank00000.bin",
                      step_dir / "weights.rank00000.bin", fs::copy_options::overwrite_existing);
      },
      "weights.rank00000.bin", "a shard file of another step", "is not the file this checkpoint",
      {"checkpoint.save_interval=1"});
}

TEST(ResumeFaultTest, TruncatedOptimizerShardIsRefusedNamingTheFile) {
  ExpectResumeRefused(
      [](const fs::path& step_dir) {
        const fs::path file = step_dir / "optimizer.rank00000.bin";
        fs::resize_file(file, fs::file_size(file) - 100);
      },
      "optimizer.rank00000.bin", "a truncated file");
}

}  // namespace
}  // namespace sluice::train
