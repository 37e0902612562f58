// `sluice train --resume` and model.init_from end to end, through the built binary:
//   - reshard: a checkpoint saved by 2 ranks at ZeRO stage 3 resumes on 1 rank at stage 0 and on
//     3 ranks at stage 2 (the same global batch), and the losses equal those of one rank that
//     never stopped, within the 1e-6 relative tolerance of tests/zero (ranks average their own
//     means; tests/train/trainer_mpi_test.cpp);
//   - init_from: `sluice convert` turns a checkpoint into safetensors; a run starting from that
//     file, or from the checkpoint itself, has the converted model's validation loss at step 0
//     exactly, and both take the same first step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/launch_command.h"
#include "tests/common/run_command.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_cli::CommandResult;
using test_cli::RunCommand;

namespace fs = std::filesystem;
using test_util::TempPath;
using test_util::WriteFile;

constexpr double kTolerance = 1e-6;

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The tiny GPT with a global batch of 12 sequences (12, 6 or 4 per rank at 1, 2 or 3 ranks).
std::string TrainCommand(const std::string& run_dir, const std::string& more) {
  const std::string corpus = WriteFile(TempPath("corpus.txt"), test_util::SyntheticCorpus(65536));
  const std::string config =
      WriteFile(TempPath("tiny.yaml"), test_util::TinyGptYaml(corpus, "runs/unused"));
  return std::string(SLUICE_BINARY) + " train --config " + config + " --run-dir " + run_dir +
         " --set train_batch_size=12 --set train_micro_batch_size_per_gpu=auto"
         " --set run.eval_interval=3 --set zero_optimization.stage3_param_persistence_threshold=64"
         " --progress off " +
         more;
}

std::string Mpirun(int ranks) {
  Result<std::string> mpirun = cli::FindMpirun();
  if (!mpirun.ok()) return "";
  const std::string root = ::geteuid() == 0 ? " --allow-run-as-root" : "";
  return *mpirun + root + " --oversubscribe --mca btl self,vader -np " + std::to_string(ranks) +
         " ";
}

void ExpectCloseCurves(const std::vector<nlohmann::json>& run,
                       const std::vector<nlohmann::json>& reference, const std::string& what) {
  ASSERT_EQ(run.size(), reference.size()) << what;
  for (size_t i = 0; i < run.size(); ++i) {
    EXPECT_EQ(run[i]["step"], reference[i]["step"]) << what;
    EXPECT_EQ(run[i]["tokens"], reference[i]["tokens"]) << what;
    const double a = run[i]["loss"].get<double>();
    const double b = reference[i]["loss"].get<double>();
    EXPECT_LE(std::abs(a - b) / std::abs(b), kTolerance)
        << what << ", step " << i + 1 << ": " << a << " vs " << b;
  }
}

TEST(ResumeCliTest, StageThreeOnTwoRanksReshardsToOneAndThreeRanks) {
  if (Mpirun(2).empty()) GTEST_SKIP() << cli::FindMpirun().status().ToString();
  const std::string reference = TempPath("reference");
  const std::string saved = TempPath("saved");
  const std::string one = TempPath("one_rank");
  const std::string three = TempPath("three_ranks");
  for (const std::string& dir : {reference, saved, one, three}) fs::remove_all(dir);

  CommandResult r = RunCommand(TrainCommand(reference, "--set run.steps=6"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunCommand(Mpirun(2) + TrainCommand(saved,
                                          "--set run.steps=3 --set checkpoint.save_interval=3"
                                          " --set zero_optimization.stage=3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(saved + "/checkpoints/step_3/manifest.json"));
  EXPECT_EQ(manifest["world"]["size"], 2);
  EXPECT_EQ(manifest["world"]["zero_stage"], 3);

  // Each continues its own copy of the run directory (and so of its metrics.jsonl).
  fs::copy(saved, one, fs::copy_options::recursive);
  fs::copy(saved, three, fs::copy_options::recursive);
  r = RunCommand(TrainCommand(one, "--set run.steps=6 --set zero_optimization.stage=0 --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  r = RunCommand(Mpirun(3) + TrainCommand(three,
                                          "--set run.steps=6 --set zero_optimization.stage=2"
                                          " --resume latest"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const std::vector<nlohmann::json> expected = ReadJsonLines(reference + "/metrics.jsonl");
  ASSERT_EQ(expected.size(), 6u);
  ExpectCloseCurves(ReadJsonLines(one + "/metrics.jsonl"), expected, "world 2 stage 3 -> 1/0");
  ExpectCloseCurves(ReadJsonLines(three + "/metrics.jsonl"), expected, "world 2 stage 3 -> 3/2");
}

TEST(ResumeCliTest, ResumeLatestWithoutCheckpointsSaysSo) {
  const std::string run = TempPath("empty");
  fs::remove_all(run);
  const CommandResult r = RunCommand(TrainCommand(run, "--set run.steps=2 --resume"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no committed checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(run + "/checkpoints"), std::string::npos) << r.output;
}

TEST(ResumeCliTest, InitFromConvertedSafetensorsHasTheConvertedModelsLoss) {
  const std::string source = TempPath("source");
  const std::string from_file = TempPath("from_safetensors");
  const std::string from_checkpoint = TempPath("from_checkpoint");
  const std::string file = TempPath("model.safetensors");
  for (const std::string& dir : {source, from_file, from_checkpoint, file}) fs::remove_all(dir);

  CommandResult r =
      RunCommand(TrainCommand(source, "--set run.steps=3 --set checkpoint.save_interval=3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunCommand(std::string(SLUICE_BINARY) + " convert " + source + " --out " + file +
                 " --dtype fp32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Validation after step 3: the loss of the weights that were converted.
  const std::vector<nlohmann::json> trained = ReadJsonLines(source + "/metrics.jsonl");
  ASSERT_EQ(trained.size(), 3u);
  ASSERT_TRUE(trained[2].contains("val_loss"));

  r = RunCommand(TrainCommand(from_file, "--set run.steps=1 --set model.init_from=" + file));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunCommand(
      TrainCommand(from_checkpoint, "--set run.steps=1 --set model.init_from=" + source));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  for (const std::string& run : {from_file, from_checkpoint}) {
    const nlohmann::json summary = nlohmann::json::parse(std::ifstream(run + "/summary.json"));
    EXPECT_EQ(summary["initial_val_loss"].dump(), trained[2]["val_loss"].dump()) << run;
  }
  const std::vector<nlohmann::json> a = ReadJsonLines(from_file + "/metrics.jsonl");
  const std::vector<nlohmann::json> b = ReadJsonLines(from_checkpoint + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0]["loss"].dump(), b[0]["loss"].dump());
  EXPECT_EQ(a[0]["grad_norm"].dump(), b[0]["grad_norm"].dump());
  // A fresh run: step 1 (the data from its start), not step 4 of the source.
  EXPECT_EQ(a[0]["step"], 1);
  EXPECT_NE(a[0]["loss"].dump(), trained[0]["loss"].dump()) << "the weights were not loaded";
}

}  // namespace
}  // namespace sluice::train
