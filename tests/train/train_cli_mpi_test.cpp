// `sluice train` on two ranks, end to end: under mpirun directly and through `sluice launch`.
// Rank 0 alone writes the run's files and prints progress and the summary, whose memory table
// sets predicted against measured peaks with the largest peak over the ranks.
#include <gtest/gtest.h>
#include <unistd.h>

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

using test_util::TempPath;
using test_util::WriteFile;

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// A tiny config at `stage` (micro-batch 4 of 32 tokens per rank).
std::string TrainArgs(int stage, const std::string& run_dir) {
  const std::string corpus = WriteFile(TempPath("corpus.txt"), test_util::SyntheticCorpus(32768));
  const std::string config =
      WriteFile(TempPath("tiny.yaml"), test_util::TinyGptYaml(corpus, "runs/unused"));
  return "train --config " + config + " --run-dir " + run_dir +
         " --set run.steps=4 --set run.eval_interval=2 --set zero_optimization.stage=" +
         std::to_string(stage) + " --progress plain";
}

void ExpectOneRunOfTwoRanks(const CommandResult& r, const std::string& run_dir) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "step 4/4"), 1u) << "progress from rank 0 only\n" << r.output;
  EXPECT_EQ(Count(r.output, "Training summary"), 1u) << r.output;
  EXPECT_EQ(Count(r.output, "max of 2 ranks"), 1u) << r.output;
  EXPECT_NE(r.output.find("on 2 ranks"), std::string::npos) << r.output;

  const std::vector<nlohmann::json> lines = ReadJsonLines(run_dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u) << "one metrics.jsonl, written once";
  for (const nlohmann::json& line : lines) EXPECT_EQ(line["tokens"], 2 * 4 * 32);
  EXPECT_FALSE(std::filesystem::exists(run_dir + "/metrics.rank1.jsonl"));

  std::ifstream summary_file(run_dir + "/summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["tokens"], 4 * 2 * 4 * 32);
  const nlohmann::json& memory = summary["memory"];
  EXPECT_EQ(memory["world_size"], 2);
  EXPECT_EQ(memory["rank"], 0);
  int device_rows = 0;
  for (const nlohmann::json& row : memory["rows"]) {
    ASSERT_TRUE(row.contains("max_over_ranks")) << row.dump();
    EXPECT_GE(row["max_over_ranks"].get<int64_t>(), row["measured"].get<int64_t>());
    if (row["tier"] != "device") continue;
    ++device_rows;
    EXPECT_GT(row["predicted"].get<int64_t>(), 0) << row.dump();
    EXPECT_GT(row["measured"].get<int64_t>(), 0) << row.dump();
  }
  EXPECT_GE(device_rows, 5) << memory.dump();
  std::ifstream record_file(run_dir + "/config.resolved.json");
  EXPECT_EQ(nlohmann::json::parse(record_file)["world_size"], 2);
}

TEST(TrainCliMpiTest, MpirunTwoRanksWritesOneRunWithTheMemoryTable) {
  Result<std::string> mpirun = cli::FindMpirun();
  if (!mpirun.ok()) GTEST_SKIP() << mpirun.status().ToString();
  const std::string run_dir = TempPath("run");
  std::filesystem::remove_all(run_dir);  // an earlier run's final checkpoint claims the dir
  const std::string root = ::geteuid() == 0 ? " --allow-run-as-root" : "";
  const CommandResult r = RunCommand(*mpirun + root + " --oversubscribe -np 2 " + SLUICE_BINARY +
                                     " " + TrainArgs(/*stage=*/2, run_dir));
  ExpectOneRunOfTwoRanks(r, run_dir);
}

TEST(TrainCliMpiTest, SluiceLaunchTwoRanksStage3) {
  if (!cli::FindMpirun().ok()) GTEST_SKIP() << cli::FindMpirun().status().ToString();
  const std::string run_dir = TempPath("run");
  std::filesystem::remove_all(run_dir);  // an earlier run's final checkpoint claims the dir
  const CommandResult r =
      RunCommand(std::string(SLUICE_BINARY) + " launch -n 2 -- " + TrainArgs(/*stage=*/3, run_dir));
  ExpectOneRunOfTwoRanks(r, run_dir);
}

// An error on every rank comes back once per rank, tagged, with exit status 1.
TEST(TrainCliMpiTest, OffloadAtStage0IsRefusedOnEveryRank) {
  if (!cli::FindMpirun().ok()) GTEST_SKIP() << cli::FindMpirun().status().ToString();
  const CommandResult r =
      RunCommand(std::string(SLUICE_BINARY) + " launch -n 2 -- " + TrainArgs(0, TempPath("run")) +
                 " --set zero_optimization.offload_optimizer.device=cpu");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offload_optimizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("needs zero_optimization.stage"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Training summary"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sluice::train
