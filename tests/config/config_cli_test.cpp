// Runs the built `sluice config check` / `sluice config help` and checks exit codes and output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

RunResult RunSluice(const std::string& args) {
  std::string command = std::string(SLUICE_BINARY) + " " + args + " 2>&1";
  RunResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string Source(const std::string& relative) {
  return std::string(SLUICE_SOURCE_DIR) + "/" + relative;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigCliTest, AcceptsAGoodFileAndPrintsTheResolvedConfig) {
  RunResult r = RunSluice("config check " + Source("configs/default.yaml") + " --world-size 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("for world size 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train_batch_size: 16"), std::string::npos) << r.output;
}

TEST(ConfigCliTest, SetOverridesAndJson) {
  RunResult r = RunSluice("config check " + Source("configs/default.yaml") +
                          " --set zero_optimization.stage=2 --set run.steps=7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"zero_optimization.stage\": {\n      \"value\": 2,\n      \"source\": "
                          "\"--set\""),
            std::string::npos)
      << r.output;
}

TEST(ConfigCliTest, RejectsABadFileWithExitCodeOne) {
  std::string path =
      WriteTemp("bad_config.yaml", "train_batch_size: 8\nzero_optimization:\n  stage: 4\n");
  RunResult r = RunSluice("config check " + path);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bad_config.yaml:3:3: zero_optimization.stage: 4 is out of range"),
            std::string::npos)
      << r.output;
}

TEST(ConfigCliTest, RejectsABadOverride) {
  RunResult r =
      RunSluice("config check " + Source("configs/default.yaml") + " --set bf16.enabeld=true");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("unknown key bf16.enabeld (did you mean bf16.enabled?)"),
            std::string::npos)
      << r.output;
}

TEST(ConfigCliTest, MissingFileFails) {
  RunResult r = RunSluice("config check /nonexistent/config.yaml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
}

TEST(ConfigCliTest, HelpListsSettings) {
  RunResult r = RunSluice("config help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("zero_optimization.offload_param.buffer_size"), std::string::npos);
  r = RunSluice("config help --markdown");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| `aio.block_size` |"), std::string::npos);
}

}  // namespace
