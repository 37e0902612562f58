// A real `sluice launch -n 2`: two ranks of `sluice env --json` under mpirun, exit status 0.
#include <gtest/gtest.h>

#include <string>

#include "cli/launch_command.h"
#include "tests/common/run_command.h"

namespace sluice::estimate {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

TEST(LaunchMpiTest, RunsTwoRanksAndExitsWithTheirStatus) {
  if (!cli::FindMpirun().ok()) GTEST_SKIP() << cli::FindMpirun().status().ToString();
  const test_cli::CommandResult ok =
      test_cli::RunSluice("launch -n 2 -- env --json", "", /*merge_stderr=*/false);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(Count(ok.output, "\"launched_by_mpirun\": true"), 2u) << ok.output;

  // A failing rank's status comes back through mpirun.
  const test_cli::CommandResult failed =
      test_cli::RunSluice("launch -n 2 -- estimate --config /nonexistent/config.yaml");
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_NE(failed.output.find("does not exist"), std::string::npos) << failed.output;
}

}  // namespace
}  // namespace sluice::estimate
