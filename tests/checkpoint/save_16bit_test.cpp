// zero_optimization.stage3_gather_16bit_weights_on_model_save through the trainer, on 1 and 2
// ranks (mpirun -np N): every checkpoint save also writes the consolidated 16-bit model into the
// step directory, in `sluice convert`'s Hugging Face layout. Its tensors are the master weights
// rounded to nearest even to bf16 (an fp32 or bf16 run) or fp16 (an fp16 run), which are the
// parameters the engine computes with (GatherFullParameters); names, shapes and bytes are what
// `sluice convert --dtype` writes. With the key off nothing extra is written. The folder resumes,
// converts and is pruned whole; model.init_from loads it (the loss within bf16 rounding of the
// trained model's); a failed write (a folder in the way, a file size limit) names the file,
// removes the partial model and leaves the checkpoint loadable.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/convert.h"
#include "engine/checkpoint/hf_layout.h"
#include "engine/checkpoint/safetensors_file.h"
#include "engine/train/checkpointing.h"
#include "engine/train/trainer.h"
#include "kernels/ref/half.h"
#include "runtime/check.h"
#include "tests/common/test_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::StateKind;
using ::sluice::testing::TestWorld;

constexpr const char* kKey = "zero_optimization.stage3_gather_16bit_weights_on_model_save";

// Every rank trains into the same run directory (rank 0 commits the checkpoints there) from a
// corpus file of its own (the ranks write them at the same time).
Config RankConfig(int stage, const std::vector<std::string>& more = {}) {
  const std::string corpus =
      test_util::WriteFile(test_util::TempPath("corpus_rank" + std::to_string(TestWorld().rank())),
                           test_util::SyntheticCorpus(64 * 1024));
  std::vector<std::string> overrides = {"train_micro_batch_size_per_gpu=2",
                                        "zero_optimization.stage=" + std::to_string(stage),
                                        "zero_optimization.stage3_param_persistence_threshold=64"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return test_util::LoadTestConfig(test_util::TinyGptYaml(corpus, test_util::TempPath("run")),
                                   overrides);
}

// A fresh run directory (left by an earlier run of the test), on every rank.
void ClearRunDir() {
  if (TestWorld().rank() == 0) fs::remove_all(test_util::TempPath("run"));
  ASSERT_TRUE(TestWorld().Barrier().ok());
}

std::unique_ptr<Trainer> MakeTrainer(const Config& config, std::optional<std::string> resume = {}) {
  TrainerOptions options = test_util::QuietTrainerOptions(&TestWorld());
  options.resume = std::move(resume);
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  return std::move(trainer).value();
}

void Train(Trainer& trainer, int steps) {
  for (int s = 0; s < steps; ++s) {
    Result<StepMetrics> m = trainer.TrainStep();
    SLUICE_CHECK(m.ok()) << m.status().ToString();
  }
}

fs::path Save(Trainer& trainer) {
  Result<fs::path> dir = trainer.SaveCheckpoint();
  SLUICE_CHECK(dir.ok()) << dir.status().ToString();
  return *dir;
}

double Evaluate(Trainer& trainer) {
  Result<double> loss = trainer.Evaluate();
  SLUICE_CHECK(loss.ok()) << loss.status().ToString();
  return *loss;
}

std::set<std::string> FileNames(const fs::path& dir) {
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// The names a save writes without the key, for `world` ranks.
std::set<std::string> CheckpointFileNames(int world) {
  std::set<std::string> names = {"manifest.json"};
  for (int r = 0; r < world; ++r) {
    names.insert(fmt::format("weights.rank{:05d}.bin", r));
    names.insert(fmt::format("optimizer.rank{:05d}.bin", r));
  }
  return names;
}

uint16_t Round(float value, DType dtype) {
  return dtype == DType::kBF16 ? kernels::F32ToBf16(value) : kernels::F32ToF16(value);
}

// `values` of parameter `name` (Sluice's [out, in] layout) in Hugging Face's layout.
std::vector<float> HfLayout(const std::string& name, const Shape& shape,
                            std::vector<float> values) {
  if (!checkpoint::IsHfConv1DWeight(name) || shape.rank() != 2) return values;
  std::vector<float> transposed(values.size());
  checkpoint::Transpose2D(values.data(), shape.dim(0), shape.dim(1), transposed.data());
  return transposed;
}

std::vector<uint16_t> ReadBits(const checkpoint::SafetensorsFile& file,
                               const checkpoint::SafetensorsTensor& t) {
  std::vector<uint16_t> bits((t.end - t.begin) / sizeof(uint16_t));
  Status read = file.Read(t, bits.data());
  EXPECT_TRUE(read.ok()) << read.ToString();
  return bits;
}

// The 16-bit model in `step_dir` against the checkpoint's master weights, the parameters the
// engine computes with (gathered from every rank: collective) and `sluice convert`'s output.
void ExpectSixteenBitModel(Trainer& trainer, const fs::path& step_dir, DType dtype) {
  std::vector<float> full(static_cast<size_t>(trainer.model().ParameterCount()));
  Status gathered = trainer.zero().GatherFullParameters(full);
  ASSERT_TRUE(gathered.ok()) << gathered.ToString();

  auto file = checkpoint::SafetensorsFile::Open(step_dir / "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto reader = checkpoint::CheckpointReader::Open(step_dir);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const auto masters = (*reader)->Tensors(StateKind::kMasterWeights);
  ASSERT_EQ((*file)->tensors().size(), masters.size());
  const model::ParameterRegistry& registry = trainer.model().registry();
  int64_t compared = 0;
  for (const model::ParameterInfo& p : registry.parameters()) {
    if (p.is_alias()) {
      EXPECT_EQ((*file)->Find(p.name), nullptr) << p.name << ": a tied head is not stored";
      continue;
    }
    const checkpoint::SafetensorsTensor* t = (*file)->Find(p.name);
    ASSERT_NE(t, nullptr) << p.name;
    EXPECT_EQ(t->dtype, checkpoint::ToSafetensorsDType(dtype)) << p.name;
    EXPECT_EQ(t->shape, checkpoint::HfShape(p.name, p.shape)) << p.name;
    const std::vector<uint16_t> bits = ReadBits(**file, *t);
    ASSERT_EQ(static_cast<int64_t>(bits.size()), p.numel) << p.name;

    std::vector<float> master(p.numel);
    ASSERT_TRUE(
        (*reader)->ReadRange(StateKind::kMasterWeights, p.name, 0, p.numel, master.data()).ok());
    master = HfLayout(p.name, p.shape, std::move(master));
    const std::vector<float> computed =
        HfLayout(p.name, p.shape,
                 std::vector<float>(full.begin() + p.offset, full.begin() + p.offset + p.numel));
    for (int64_t e = 0; e < p.numel; ++e) {
      ASSERT_EQ(bits[e], Round(master[e], dtype)) << p.name << " element " << e;
      // In a bf16 or fp16 run the engine's parameters are these 16-bit values exactly.
      ASSERT_EQ(bits[e], Round(computed[e], dtype)) << p.name << " element " << e;
      if (trainer.config().model.dtype == dtype) {
        const float widened =
            dtype == DType::kBF16 ? kernels::Bf16ToF32(bits[e]) : kernels::F16ToF32(bits[e]);
        ASSERT_EQ(widened, computed[e]) << p.name << " element " << e;
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int64_t>(masters.size()));

  // `sluice convert --dtype` of the same checkpoint: the same tensors, bytes and config.json.
  if (TestWorld().rank() == 0) {
    const fs::path out = test_util::TempPath("converted");
    fs::remove_all(out);
    checkpoint::ConvertOptions options;
    options.dtype = dtype;
    auto summary = checkpoint::ConvertCheckpointToHfFolder(step_dir, out, options);
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    auto converted = checkpoint::SafetensorsFile::Open(out / "model.safetensors");
    ASSERT_TRUE(converted.ok()) << converted.status().ToString();
    ASSERT_EQ((*converted)->tensors().size(), (*file)->tensors().size());
    for (size_t i = 0; i < (*file)->tensors().size(); ++i) {
      const auto& a = (*file)->tensors()[i];
      const auto& b = (*converted)->tensors()[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.dtype, b.dtype);
      EXPECT_EQ(a.shape, b.shape);
      EXPECT_EQ(ReadBits(**file, a), ReadBits(**converted, b)) << a.name;
    }
    auto text = [](const fs::path& path) {
      std::ifstream in(path);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    EXPECT_EQ(text(step_dir / "config.json"), text(out / "config.json"));
    const std::string torch_dtype = dtype == DType::kBF16 ? "bfloat16" : "float16";
    EXPECT_NE(text(step_dir / "config.json").find("\"torch_dtype\": \"" + torch_dtype + "\""),
              std::string::npos);
  }
  ASSERT_TRUE(TestWorld().Barrier().ok());
}

struct PrecisionCase {
  const char* name;
  std::vector<std::string> overrides;
  DType expected;
};

void PrintTo(const PrecisionCase& c, std::ostream* os) { *os << c.name; }

class Save16BitPrecisionTest : public ::testing::TestWithParam<PrecisionCase> {};

// At stage 3 (sharded parameters) and at stage 1 (replicated), as DeepSpeed's save_16bit_model
// works at every stage.
TEST_P(Save16BitPrecisionTest, EverySaveWritesTheRoundedMasterWeights) {
  for (int stage : {3, 1}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    ClearRunDir();
    std::vector<std::string> overrides = GetParam().overrides;
    overrides.push_back(std::string(kKey) + "=true");
    const Config config = RankConfig(stage, overrides);
    ASSERT_EQ(Consolidated16BitDType(config), GetParam().expected);
    auto trainer = MakeTrainer(config);
    Train(*trainer, 3);
    const fs::path first = Save(*trainer);
    Train(*trainer, 2);
    const fs::path second = Save(*trainer);
    std::set<std::string> expected = CheckpointFileNames(TestWorld().size());
    expected.insert({"model.safetensors", "config.json"});
    EXPECT_EQ(FileNames(first), expected) << "no temporary file is left";
    EXPECT_EQ(FileNames(second), expected);
    ExpectSixteenBitModel(*trainer, second, GetParam().expected);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, Save16BitPrecisionTest,
    ::testing::Values(PrecisionCase{"fp32_run_writes_bf16", {}, DType::kBF16},
                      PrecisionCase{"bf16", {"bf16.enabled=true"}, DType::kBF16},
                      PrecisionCase{"fp16", {"fp16.enabled=true"}, DType::kF16}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Save16BitTest, WithTheKeyOffNothingExtraIsWritten) {
  ClearRunDir();
  auto trainer = MakeTrainer(RankConfig(3, {std::string(kKey) + "=false"}));
  Train(*trainer, 2);
  EXPECT_EQ(FileNames(Save(*trainer)), CheckpointFileNames(TestWorld().size()));
}

// The extra files neither disturb a resume nor `sluice convert`, and go with their checkpoint when
// checkpoint.keep_last prunes it.
TEST(Save16BitTest, ResumesConvertsAndIsPrunedWithItsCheckpoint) {
  ClearRunDir();
  const Config config = RankConfig(3, {std::string(kKey) + "=true", "checkpoint.keep_last=1"});
  auto trainer = MakeTrainer(config);
  Train(*trainer, 2);
  const fs::path first = Save(*trainer);
  Train(*trainer, 2);
  const fs::path second = Save(*trainer);
  EXPECT_FALSE(fs::exists(first)) << "pruned with its model files";
  EXPECT_EQ(FileNames(second.parent_path()), (std::set<std::string>{"latest", "step_4"}));
  const StepMetrics next = [&] {
    Result<StepMetrics> m = trainer->TrainStep();
    SLUICE_CHECK(m.ok()) << m.status().ToString();
    return *m;
  }();

  auto resumed = MakeTrainer(config, second.string());
  EXPECT_EQ(resumed->steps_done(), 4);
  Result<StepMetrics> m = resumed->TrainStep();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(test_util::SameBits(m->loss, next.loss)) << "the continuation is the same run";

  if (TestWorld().rank() == 0) {
    const fs::path out = test_util::TempPath("converted");
    fs::remove_all(out);
    auto summary = checkpoint::ConvertCheckpointToHfFolder(second.parent_path().parent_path(), out);
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    EXPECT_EQ(summary->dtype, DType::kF32);
    EXPECT_EQ(summary->step, 4);
  }
  ASSERT_TRUE(TestWorld().Barrier().ok());
}

// model.init_from on the 16-bit model: the validation loss of the trained model within bf16
// rounding, and far closer to it than a fresh model's. The step directory itself (config.json
// now beside the master weights) still loads the fp32 master weights exactly.
TEST(Save16BitTest, InitFromTheSixteenBitModelLoads) {
  ClearRunDir();
  const Config config = RankConfig(3, {std::string(kKey) + "=true"});
  auto trainer = MakeTrainer(config);
  const double fresh = Evaluate(*trainer);
  Train(*trainer, 12);
  const double trained = Evaluate(*trainer);
  const fs::path step_dir = Save(*trainer);
  trainer.reset();

  auto from_16bit =
      MakeTrainer(RankConfig(3, {"model.init_from=" + (step_dir / "model.safetensors").string()}));
  const double loaded = Evaluate(*from_16bit);
  EXPECT_NEAR(loaded, trained, 0.01 * trained);
  EXPECT_LT(std::abs(loaded - trained) * 20, std::abs(fresh - trained))
      << "fresh " << fresh << ", trained " << trained << ", loaded " << loaded;
  from_16bit.reset();

  auto from_masters = MakeTrainer(RankConfig(3, {"model.init_from=" + step_dir.string()}));
  EXPECT_TRUE(test_util::SameBits(Evaluate(*from_masters), trained));
}

// Rank 0 cannot write the model: every rank gets the error (rank 0's names the file), no part of
// the model is left, and the checkpoint verifies and resumes.
class Save16BitFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClearRunDir();
    config_ = RankConfig(3, {std::string(kKey) + "=true"});
    trainer_ = MakeTrainer(config_);
    Train(*trainer_, 2);
    step_dir_ = Save(*trainer_);
  }

  void ExpectFailedAndIntact(const Status& status, const std::string& file) {
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find(step_dir_.string()), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(kKey), std::string::npos) << status.message();
    if (TestWorld().rank() == 0) {
      EXPECT_NE(status.message().find(file), std::string::npos) << status.message();
    }
    ASSERT_TRUE(TestWorld().Barrier().ok());
    EXPECT_EQ(FileNames(step_dir_), CheckpointFileNames(TestWorld().size()));
    auto reader = checkpoint::CheckpointReader::Open(step_dir_);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_TRUE((*reader)->VerifyAll().ok());
    auto resumed = MakeTrainer(config_, step_dir_.string());
    EXPECT_EQ(resumed->steps_done(), 2);
  }

  Config config_;
  std::unique_ptr<Trainer> trainer_;
  fs::path step_dir_;
};

TEST_F(Save16BitFailureTest, AFolderInTheWayOfConfigJson) {
  if (TestWorld().rank() == 0) {
    fs::remove(step_dir_ / "config.json");
    fs::create_directories(step_dir_ / "config.json" / "occupied");
  }
  ASSERT_TRUE(TestWorld().Barrier().ok());
  const Status status =
      SaveConsolidated16BitModel(config_, trainer_->model().registry(), step_dir_, TestWorld());
  ExpectFailedAndIntact(status, (step_dir_ / "config.json").string());
}

// A file size limit (RLIMIT_FSIZE) fails writes as a full disk does.
TEST_F(Save16BitFailureTest, AFileSizeLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  if (TestWorld().rank() == 0) {
    fs::remove(step_dir_ / "config.json");
    fs::remove(step_dir_ / "model.safetensors");
    rlimit small = saved;
    small.rlim_cur = 4096;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  }
  const Status status =
      SaveConsolidated16BitModel(config_, trainer_->model().registry(), step_dir_, TestWorld());
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, previous);
  ExpectFailedAndIntact(status, (step_dir_ / "model.safetensors").string());
}

}  // namespace
}  // namespace sluice::train
