// What a resume trusts, through the trainer (one rank): a checkpoint whose manifest was edited in
// any field that decides the continuation (step, optimizer step, tokens, schedule, data position,
// epoch, seed, config), or that has a duplicated key, is refused naming the field; an edit whose
// checksums were recomputed is still caught by the cross-field checks (and so is one in a version
// 1 manifest, which has none); a shard file from another step is refused; a resume whose
// trajectory-deciding settings or training data differ is refused naming them unless allowed; a
// fresh run into a directory holding another run is refused unless told to overwrite; a resume
// without its metrics says so and appends; initial weights with a NaN are refused naming the
// tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint/hf_layout.h"
#include "engine/checkpoint/manifest_checksum.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "engine/train/trainer.h"
#include "runtime/durable_file.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using test_util::TempPath;
using test_util::WriteFile;

std::string ReadText(const fs::path& path) {
  Result<std::string> text = ReadWholeFile(path);
  SLUICE_CHECK(text.ok()) << text.status().ToString();
  return *text;
}

size_t CountLines(const fs::path& path) {
  std::ifstream in(path);
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

bool Contains(const Status& s, std::string_view text) {
  return s.ToString().find(text) != std::string::npos;
}

class ResumeIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_dir_ = TempPath("run");
    fs::remove_all(run_dir_);
    corpus_ = WriteFile(TempPath("corpus.txt"), test_util::SyntheticCorpus(64 * 1024));
  }

  // The tiny GPT, 2 sequences a step, saving every 3 steps and after the last.
  Config MakeConfig(int steps, const std::vector<std::string>& more = {},
                    const std::string& corpus = "") {
    std::vector<std::string> overrides = {"train_micro_batch_size_per_gpu=2", "run.eval_interval=0",
                                          "checkpoint.save_interval=3",
                                          "run.steps=" + std::to_string(steps)};
    overrides.insert(overrides.end(), more.begin(), more.end());
    return test_util::LoadTestConfig(
        test_util::TinyGptYaml(corpus.empty() ? corpus_ : corpus, run_dir_), overrides);
  }
  static TrainerOptions Options(std::optional<std::string> resume = std::nullopt) {
    TrainerOptions options;
    options.progress = ProgressMode::kOff;
    options.summary_stream = nullptr;
    options.resume = std::move(resume);
    return options;
  }
  static Status Train(const Config& config, const TrainerOptions& options) {
    Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
    if (!trainer.ok()) return trainer.status();
    return (*trainer)->Run().status();
  }
  Status Resume(const std::vector<std::string>& more = {}, bool allow_change = false) {
    TrainerOptions options = Options("latest");
    options.allow_config_change = allow_change;
    return Train(MakeConfig(6, more), options);
  }
  fs::path StepDir(int step) const {
    return fs::path(run_dir_) / "checkpoints" / ("step_" + std::to_string(step));
  }
  fs::path Manifest(int step = 3) const { return StepDir(step) / "manifest.json"; }

  std::string run_dir_;
  std::string corpus_;
};

struct FieldEdit {
  std::vector<std::string> path;  // keys from the root
  std::function<Json(const Json&)> change;
  std::vector<std::string> expected;  // in the error
};

Json& At(Json& root, const std::vector<std::string>& path) {
  Json* node = &root;
  for (const std::string& key : path) node = &node->at(key);
  return *node;
}

Json PlusOne(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() + 1;
  if (v.is_number_integer()) return v.get<int64_t>() + 1;
  return v.get<double>() * 2;
}

// The check of issue 23: each field that decides the continuation, edited, is refused naming it.
TEST_F(ResumeIntegrityTest, EachEditedFieldIsRefusedNamingIt) {
  ASSERT_TRUE(Train(MakeConfig(3), Options()).ok());
  const std::string original = ReadText(Manifest());
  const std::vector<std::vector<std::string>> fields = {
      {"step"},
      {"states", "step"},
      {"states", "total_tokens"},
      {"states", "optimizer", "step"},
      {"states", "lr_schedule", "last_batch_iteration"},
      {"states", "data_loader", "position"},
      {"states", "data_loader", "epoch"},
      {"states", "data_loader", "seed"},
      {"states", "loss_scaler", "scale"},
      {"world", "zero_stage"},
      {"config", "settings", "optimizer.params.lr", "value"},
      {"config", "settings", "data.seed", "value"},
  };
  for (const std::vector<std::string>& path : fields) {
    Json manifest = Json::parse(original);
    At(manifest, path) = PlusOne(At(manifest, path));
    WriteFile(Manifest().string(), manifest.dump(2));
    std::string name;
    for (size_t i = 0; i < path.size() && i < 3; ++i) name += (i ? "." : "") + path[i];
    Status s = Resume();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << name << ": " << s.ToString();
    EXPECT_TRUE(Contains(s, "field '" + name + "'")) << name << ": " << s.ToString();
    EXPECT_TRUE(Contains(s, Manifest().string())) << s.ToString();
  }
  // A duplicated key, which a reader would resolve silently one way or the other.
  std::string text = original;
  const size_t at = text.find("\"position\"");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"position\": 0, ");
  WriteFile(Manifest().string(), text);
  Status s = Resume();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_TRUE(Contains(s, "field 'states.data_loader.position' appears twice")) << s.ToString();

  WriteFile(Manifest().string(), original);
  EXPECT_TRUE(Resume().ok());
}

// Edits made consistent with the checksums (or in a version 1 manifest, which has none) are
// caught by the fields' relations to each other.
TEST_F(ResumeIntegrityTest, ForgedProgressIsCaughtByTheCrossFieldChecks) {
  ASSERT_TRUE(Train(MakeConfig(3), Options()).ok());
  const std::string original = ReadText(Manifest());
  auto reseal = [](Json* m) { checkpoint::SealManifestJson(m); };
  auto legacy = [](Json* m) {
    m->erase("checksum");
    m->erase("field_checksums");
    (*m)["format_version"] = 1;
    for (Json& rank : (*m)["world"]["ranks"]) {
      for (auto& [group, file] : rank["files"].items()) file.erase("checksum");
    }
  };
  const std::vector<FieldEdit> edits = {
      {{"step"}, PlusOne, {"field 'step' is 4 but the checkpoint's directory is step_3"}},
      {{"states", "step"}, PlusOne, {"field 'states.step' is 4"}},
      {{"states", "optimizer", "step"}, PlusOne, {"field 'states.optimizer.step' is 4"}},
      {{"states", "lr_schedule", "last_batch_iteration"},
       PlusOne,
       {"field 'states.lr_schedule.last_batch_iteration' is 3"}},
      {{"states", "total_tokens"}, [](const Json&) { return 64 * 7; }, {"states.total_tokens"}},
      {{"states", "data_loader", "position"},
       PlusOne,
       {"states.total_tokens", "states.data_loader.epoch and .position"}},
      {{"states", "data_loader", "epoch"},
       PlusOne,
       {"states.total_tokens", "states.data_loader.epoch and .position"}},
  };
  for (const auto& finish :
       {std::function<void(Json*)>(reseal), std::function<void(Json*)>(legacy)}) {
    for (const FieldEdit& edit : edits) {
      Json manifest = Json::parse(original);
      At(manifest, edit.path) = edit.change(At(manifest, edit.path));
      finish(&manifest);
      WriteFile(Manifest().string(), manifest.dump(2));
      Status s = Resume();
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << edit.path.back() << ": " << s.ToString();
      for (const std::string& text : edit.expected) {
        EXPECT_TRUE(Contains(s, text)) << text << ": " << s.ToString();
      }
    }
  }
  // Unedited, a version 1 manifest still resumes.
  Json manifest = Json::parse(original);
  legacy(&manifest);
  WriteFile(Manifest().string(), manifest.dump(2));
  Status s = Resume();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(ResumeIntegrityTest, AShardFileFromAnotherStepIsRefused) {
  ASSERT_TRUE(Train(MakeConfig(6), Options()).ok());
  const fs::path file = StepDir(6) / "optimizer.rank00000.bin";
  fs::copy_file(StepDir(3) / "optimizer.rank00000.bin", file, fs::copy_options::overwrite_existing);
  Status s = Train(MakeConfig(9), Options("latest"));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_TRUE(Contains(s, file.string())) << s.ToString();
  EXPECT_TRUE(Contains(s, "not the file this checkpoint was saved with")) << s.ToString();
}

TEST_F(ResumeIntegrityTest, AChangedTrajectoryIsRefusedNamingEverySettingUnlessAllowed) {
  ASSERT_TRUE(Train(MakeConfig(3), Options()).ok());
  Status s = Resume({"optimizer.params.lr=1.0e-3", "data.seed=8", "bf16.enabled=true",
                     "train_micro_batch_size_per_gpu=4", "scheduler.params.warmup_num_steps=8"});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  for (const char* text : {"train_batch_size 2 -> 4", "optimizer.params.lr 0.003 -> 0.001",
                           "scheduler.params.warmup_num_steps 4 -> 8", "data.seed 7 -> 8",
                           "bf16.enabled false -> true", "model.dtype \"f32\" -> \"bf16\"",
                           "--allow-config-change", "step_3"}) {
    EXPECT_TRUE(Contains(s, text)) << text << ": " << s.ToString();
  }
  // What does not change where the run goes: the steps, the ZeRO stage, threads, logging.
  s = Resume({"zero_optimization.stage=1", "device.threads=2", "run.log_interval=1"});
  EXPECT_TRUE(s.ok()) << s.ToString();
  // Allowed: the run goes on with the new settings (from step 3 again: a fresh run replaces the
  // checkpoints of the one that went on to 6).
  TrainerOptions fresh = Options();
  fresh.overwrite = true;
  ASSERT_TRUE(Train(MakeConfig(3), fresh).ok());
  s = Resume({"optimizer.params.lr=1.0e-3"}, /*allow_change=*/true);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(fs::exists(Manifest(6)));
}

// Adam's state (exp_avg, exp_avg_sq) and Lion's (exp_avg, a momentum of other meaning) cannot
// continue each other: refused both ways naming both optimizers, even with --allow-config-change;
// the weights alone (model.init_from) start the other optimizer fresh.
TEST_F(ResumeIntegrityTest, AnAdamCheckpointDoesNotResumeALionRunNorTheReverse) {
  auto lion_config = [&](int steps, const std::vector<std::string>& more = {}) {
    std::vector<std::string> overrides = {"train_micro_batch_size_per_gpu=2", "run.eval_interval=0",
                                          "checkpoint.save_interval=3",
                                          "run.steps=" + std::to_string(steps)};
    overrides.insert(overrides.end(), more.begin(), more.end());
    return test_util::LoadTestConfig(
        test_util::WithLionOptimizer(test_util::TinyGptYaml(corpus_, run_dir_)), overrides);
  };
  ASSERT_TRUE(Train(MakeConfig(3), Options()).ok());
  const Json saved = Json::parse(ReadText(Manifest()));
  EXPECT_EQ(saved["states"]["optimizer"]["type"], "AdamW");
  for (bool allow : {false, true}) {
    TrainerOptions options = Options("latest");
    options.allow_config_change = allow;
    Status s = Train(lion_config(6), options);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    for (const char* text :
         {"optimizer.type AdamW (exp_avg and exp_avg_sq)", "this run's optimizer.type is Lion",
          "--allow-config-change", "model.init_from", "step_3"}) {
      EXPECT_TRUE(Contains(s, text)) << text << ": " << s.ToString();
    }
  }

  // A Lion run saves exp_avg without exp_avg_sq, and does not resume an AdamW run.
  TrainerOptions fresh = Options();
  fresh.overwrite = true;
  ASSERT_TRUE(Train(lion_config(3), fresh).ok());
  const Json lion = Json::parse(ReadText(Manifest()));
  EXPECT_EQ(lion["states"]["optimizer"]["type"], "Lion");
  int exp_avg = 0;
  for (const Json& t : lion["tensors"]) {
    EXPECT_NE(t["kind"], "exp_avg_sq") << t.dump();
    exp_avg += t["kind"] == "exp_avg" ? 1 : 0;
  }
  EXPECT_GT(exp_avg, 0);
  Status s = Resume({}, /*allow_change=*/true);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Contains(s, "optimizer.type Lion (exp_avg only)")) << s.ToString();
  EXPECT_TRUE(Contains(s, "this run's optimizer.type is AdamW")) << s.ToString();
  // Lion resumes Lion.
  TrainerOptions resume = Options("latest");
  EXPECT_TRUE(Train(lion_config(6), resume).ok());

  // The Lion checkpoint's weights start a fresh AdamW run elsewhere.
  const std::string lion_step = StepDir(6).string();
  run_dir_ = TempPath("adam_from_lion");
  fs::remove_all(run_dir_);
  s = Train(MakeConfig(3, {"model.init_from=" + lion_step}), Options());
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(ResumeIntegrityTest, OtherTrainingDataIsRefusedAndTheSameDataElsewhereIsNot) {
  ASSERT_TRUE(Train(MakeConfig(3), Options()).ok());
  // The same size, other text.
  const std::string other =
      WriteFile(TempPath("other.txt"), test_util::SyntheticCorpus(64 * 1024, /*seed=*/999));
  TrainerOptions options = Options("latest");
  Status s = Train(MakeConfig(6, {}, other), options);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Contains(s, "training data \"" + corpus_ + " (65536 bytes, xxh3:")) << s.ToString();
  EXPECT_TRUE(Contains(s, other)) << s.ToString();
  // The same bytes under another name: the content decides.
  const std::string moved = WriteFile(TempPath("moved.txt"), ReadText(corpus_));
  s = Train(MakeConfig(6, {}, moved), options);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(ResumeIntegrityTest, AFreshRunIntoAnotherRunsDirectoryIsRefusedUnlessOverwriting) {
  ASSERT_TRUE(Train(MakeConfig(6), Options()).ok());
  const fs::path metrics = fs::path(run_dir_) / "metrics.jsonl";
  ASSERT_EQ(CountLines(metrics), 6u);
  Status s = Train(MakeConfig(2), Options());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  for (const std::string& text :
       {"run directory " + run_dir_ + " holds another run", std::string("checkpoints up to step 6"),
        std::string("--resume"), std::string("--overwrite")}) {
    EXPECT_TRUE(Contains(s, text)) << text << ": " << s.ToString();
  }
  // Nothing of the old run was touched.
  EXPECT_EQ(CountLines(metrics), 6u);
  EXPECT_TRUE(fs::exists(Manifest(3)));
  EXPECT_TRUE(fs::exists(Manifest(6)));

  TrainerOptions overwrite = Options();
  overwrite.overwrite = true;
  s = Train(MakeConfig(2), overwrite);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(CountLines(metrics), 2u);
  EXPECT_FALSE(fs::exists(StepDir(3)));
  EXPECT_FALSE(fs::exists(StepDir(6)));
  EXPECT_TRUE(fs::exists(Manifest(2)));
  EXPECT_EQ(ReadText(fs::path(run_dir_) / "checkpoints" / "latest"), "step_2\n");
}

TEST_F(ResumeIntegrityTest, AResumeWithoutItsMetricsSaysSoAndAppends) {
  ASSERT_TRUE(Train(MakeConfig(3), Options()).ok());
  const fs::path metrics = fs::path(run_dir_) / "metrics.jsonl";
  fs::remove(metrics);
  ::testing::internal::CaptureStderr();
  Status s = Resume();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(log.find(metrics.string() + " is missing"), std::string::npos) << log;
  EXPECT_NE(log.find("lacks steps 1-3"), std::string::npos) << log;
  std::ifstream in(metrics);
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) {
    steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 5, 6}));
}

TEST_F(ResumeIntegrityTest, InitialWeightsWithANaNAreRefusedNamingTheTensor) {
  // Every parameter of the model, in Hugging Face's layout, zero but one NaN.
  Result<std::unique_ptr<Trainer>> model = Trainer::Create(
      MakeConfig(1, {"checkpoint.save_interval=0"}), test_util::QuietTrainerOptions());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<checkpoint::SafetensorsTensorSpec> specs;
  std::string poisoned;
  for (const model::ParameterInfo& p : (*model)->model().registry().parameters()) {
    if (p.is_alias()) continue;
    specs.push_back({.name = p.name, .shape = checkpoint::HfShape(p.name, p.shape)});
    if (poisoned.empty() && p.numel > 10) poisoned = p.name;
  }
  model->reset();
  const fs::path file = TempPath("nan.safetensors");
  {
    auto writer = checkpoint::SafetensorsWriter::Create(file, specs, {{"format", "pt"}});
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    while (const checkpoint::SafetensorsTensor* t = (*writer)->current()) {
      std::vector<float> values(static_cast<size_t>(t->numel()), 0.0f);
      if (t->name == poisoned) values[7] = std::numeric_limits<float>::quiet_NaN();
      ASSERT_TRUE((*writer)->Append(values.data(), values.size() * sizeof(float)).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  Status s = Train(
      MakeConfig(1, {"checkpoint.save_interval=0", "model.init_from=" + file.string()}), Options());
  ASSERT_FALSE(s.ok()) << "a NaN weight was loaded";
  EXPECT_TRUE(Contains(s, "tensor '" + poisoned + "' holds nan at element")) << s.ToString();
  EXPECT_TRUE(Contains(s, file.string())) << s.ToString();
}

}  // namespace
}  // namespace sluice::train
