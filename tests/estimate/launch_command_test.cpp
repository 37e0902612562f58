// The mpirun command line of `sluice launch`, built from a request (no process is started).
#include "cli/launch_command.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace sluice::cli {
namespace {

LaunchRequest Request(int ranks, int cores) {
  LaunchRequest r;
  r.ranks = ranks;
  r.cores = cores;
  r.mpirun = "/usr/bin/mpirun";
  r.sluice = "/opt/sluice/bin/sluice";
  r.command = {"train", "--config", "run.yaml"};
  return r;
}

bool Has(const std::vector<std::string>& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

// The words following `word`.
std::string After(const std::vector<std::string>& argv, const std::string& word) {
  auto it = std::find(argv.begin(), argv.end(), word);
  return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

TEST(LaunchCommandTest, GivesEachRankItsShareOfTheCores) {
  auto argv = BuildMpirunCommand(Request(2, 8));
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  EXPECT_EQ((*argv)[0], "/usr/bin/mpirun");
  EXPECT_EQ(After(*argv, "-np"), "2");
  EXPECT_EQ(After(*argv, "--map-by"), "slot:PE=4");
  EXPECT_EQ(After(*argv, "--bind-to"), "core");
  EXPECT_FALSE(Has(*argv, "--oversubscribe"));
  EXPECT_FALSE(Has(*argv, "--allow-run-as-root"));
  EXPECT_TRUE(Has(*argv, "OMP_NUM_THREADS=4"));
  EXPECT_EQ(After(*argv, "btl"), "self,vader");
  // The command follows the sluice binary, unchanged.
  const std::vector<std::string> tail(argv->end() - 4, argv->end());
  EXPECT_EQ(tail,
            (std::vector<std::string>{"/opt/sluice/bin/sluice", "train", "--config", "run.yaml"}));
}

TEST(LaunchCommandTest, OversubscribesAndUnbindsWhenRanksOutnumberCores) {
  auto argv = BuildMpirunCommand(Request(4, 2));
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Has(*argv, "--oversubscribe"));
  EXPECT_EQ(After(*argv, "--bind-to"), "none");
  EXPECT_FALSE(Has(*argv, "--map-by"));
  EXPECT_TRUE(Has(*argv, "OMP_NUM_THREADS=1"));

  LaunchRequest refused = Request(4, 2);
  refused.oversubscribe = Oversubscribe::kNo;
  auto error = BuildMpirunCommand(refused);
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.status().message().find("--oversubscribe yes"), std::string::npos);

  LaunchRequest forced = Request(1, 4);
  forced.oversubscribe = Oversubscribe::kYes;
  forced.binding = Binding::kNone;
  argv = BuildMpirunCommand(forced);
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Has(*argv, "--oversubscribe"));
  EXPECT_EQ(After(*argv, "--bind-to"), "none");
}

TEST(LaunchCommandTest, AllowsRootAndPassesSluiceAndOpenMpVariables) {
  LaunchRequest r = Request(2, 4);
  r.root = true;
  r.environment_names = {"PATH", "SLUICE_LOG", "OMP_NUM_THREADS", "HOME", "SLUICE_CFG_RUN__STEPS"};
  auto argv = BuildMpirunCommand(r);
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Has(*argv, "--allow-run-as-root"));
  int exported = 0;
  for (size_t i = 0; i + 1 < argv->size(); ++i) {
    if ((*argv)[i] != "-x") continue;
    ++exported;
    EXPECT_TRUE((*argv)[i + 1].starts_with("SLUICE_") || (*argv)[i + 1] == "OMP_NUM_THREADS")
        << (*argv)[i + 1];
  }
  EXPECT_EQ(exported, 3);  // the caller's OMP_NUM_THREADS replaces the default share
  EXPECT_FALSE(Has(*argv, "OMP_NUM_THREADS=2"));
}

TEST(LaunchCommandTest, RefusesNoRanksAndNoCommand) {
  EXPECT_EQ(BuildMpirunCommand(Request(0, 2)).status().code(), StatusCode::kInvalidArgument);
  LaunchRequest empty = Request(2, 2);
  empty.command.clear();
  auto error = BuildMpirunCommand(empty);
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.status().message().find("after --"), std::string::npos);
}

TEST(LaunchCommandTest, FindsExecutablesOnASearchPath) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sluice_launch_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "a");
  std::filesystem::create_directories(dir / "b");
  std::ofstream(dir / "a" / "tool") << "not executable";
  std::ofstream(dir / "b" / "tool") << "#!/bin/sh\n";
  ::chmod((dir / "b" / "tool").c_str(), 0755);
  const std::string path = (dir / "a").string() + ":" + (dir / "b").string();
  auto found = FindExecutable("tool", path);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, (dir / "b" / "tool").string());
  auto missing = FindExecutable("no_such_tool", path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(LaunchCommandTest, QuotesWordsForTheShell) {
  EXPECT_EQ(ShellJoin({"mpirun", "-np", "2", "a b", "it's", "", "--set=x=1"}),
            "mpirun -np 2 'a b' 'it'\\''s' '' --set=x=1");
}

}  // namespace
}  // namespace sluice::cli
