// The built `sluice estimate` and `sluice launch --dry-run`: exit codes, tables, JSON records and
// the mpirun command line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/launch_command.h"
#include "tests/common/run_command.h"

namespace sluice::estimate {
namespace {

using test_cli::CommandResult;
using test_cli::RunSluice;
using test_cli::SourcePath;

TEST(EstimateCliTest, PrintsAJsonRecordForTheRanksAsked) {
  const CommandResult r = RunSluice(
      "estimate --config " + SourcePath("configs/llama_tiny.yaml") + " --ranks 2 --json", "",
      /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["schema"], "sluice.memory_estimate/1");
  EXPECT_EQ(j["settings"]["world_size"], 2);
  EXPECT_EQ(j["settings"]["stage"], 2);  // as llama_tiny.yaml says
  int64_t sum = 0;
  for (const auto& [name, bytes] : j["per_rank"]["device"]["categories"].items()) {
    sum += bytes.get<int64_t>();
  }
  EXPECT_EQ(sum, j["per_rank"]["device"]["total"].get<int64_t>());
  EXPECT_GT(j["per_rank"]["device"]["categories"]["activations"].get<int64_t>(), 0);
  EXPECT_EQ(j["stages"].size(), 7u);
  EXPECT_EQ(j["budgets"][0]["limit"], 128 << 20);  // device.memory_limit: 128MiB
}

TEST(EstimateCliTest, ExplainsEachLineAndTheBudgetsInTheTable) {
  const CommandResult r =
      RunSluice("estimate --config " + SourcePath("configs/llama_tiny.yaml") +
                " --set zero_optimization.stage=3 --set device.memory_limit=4MiB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text :
       {"ZeRO stage 3 on 1 rank(s)", "Line items", "parameter shard", "Σ ceil(numel/1)", "Budgets",
        "DOES NOT FIT", "Each change below alone", "ZeRO stages on 1 rank(s)"}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
}

TEST(EstimateCliTest, RefusesAConfigWithoutAModel) {
  const std::string path = ::testing::TempDir() + "estimate_no_model.json";
  std::FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}})", file);
  std::fclose(file);
  const CommandResult r = RunSluice("estimate --config " + path);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no model section"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--model FILE"), std::string::npos) << r.output;
}

TEST(LaunchCliTest, DryRunPrintsTheMpirunCommand) {
  const CommandResult r = RunSluice("launch -n 3 --dry-run -- train --config 'my run.yaml' -n 9",
                                    "env SLUICE_ESTIMATE_TEST=1", /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mpirun -np 3 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-x SLUICE_ESTIMATE_TEST"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::string(SLUICE_BINARY) + " train --config 'my run.yaml' -n 9\n"),
            std::string::npos)
      << r.output;
  const bool crowded = 3 > cli::UsableCores();
  EXPECT_EQ(r.output.find("--oversubscribe") != std::string::npos, crowded) << r.output;
  EXPECT_EQ(r.output.find("--allow-run-as-root") != std::string::npos, ::geteuid() == 0)
      << r.output;
}

TEST(LaunchCliTest, NamesThePackageWhenMpirunIsMissing) {
  const CommandResult r = RunSluice("launch -n 2 -- env", "env -u SLUICE_MPIRUN PATH=/nonexistent");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("openmpi-bin"), std::string::npos) << r.output;
}

TEST(LaunchCliTest, RefusesAMissingCommand) {
  const CommandResult r = RunSluice("launch -n 2 --dry-run");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("after --"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sluice::estimate
