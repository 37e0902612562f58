// `sluice launch --hostfile` on two hosts of one machine: localhost and the loopback alias
// 127.0.0.2, which Open MPI takes for another node and reaches through its remote launch agent.
// There is no ssh here: the agent is a script the test writes that drops the host name and runs
// the command locally. A two-rank training run across the "hosts" completes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/launch_command.h"
#include "tests/common/run_command.h"

namespace sluice::cli {
namespace {

std::string Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

TEST(LaunchHostsTest, TrainsOnTwoHostsThroughAHostfile) {
  if (!FindMpirun().ok()) GTEST_SKIP() << FindMpirun().status().ToString();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sluice_hosts_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string log = (dir / "agent.log").string();
  const std::string agent = Write(
      dir / "agent.sh", "#!/bin/sh\necho \"$1\" >> " + log + "\nshift\nexec /bin/sh -c \"$*\"\n");
  ::chmod(agent.c_str(), 0755);
  const std::string hosts =
      Write(dir / "hosts", "# this machine, twice\nlocalhost slots=1\n127.0.0.2 slots=1\n");
  std::string corpus;
  for (int i = 0; i < 3000; ++i)
    corpus += "pack my box with five dozen jugs " + std::to_string(i) + "\n";
  const std::string corpus_path = Write(dir / "corpus.txt", corpus);
  const std::string config = Write(
      dir / "tiny.yaml",
      "train_micro_batch_size_per_gpu: 2\ngradient_accumulation_steps: 1\n"
      "optimizer: {type: AdamW, params: {lr: 1.0e-3}}\n"
      "model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 16, seq_len: 16, vocab_size: 256}\n"
      "data: {train_path: " +
          corpus_path +
          ", format: text, val_fraction: 0}\n"
          "device: {type: cpu, memory_limit: 64MiB, threads: 1}\n"
          "run: {steps: 3, eval_interval: 0, comm_timeout: 60}\n");
  const std::string run_dir = (dir / "run").string();
  // Loopback only: Open MPI leaves lo out of its TCP interfaces by default.
  const std::string launcher_args = "--launcher-args '--mca plm_rsh_agent " + agent +
                                    " --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo'";
  const test_cli::CommandResult r = test_cli::RunSluice(
      "launch --hostfile " + hosts + " " + launcher_args + " -- train --config " + config +
      " --run-dir " + run_dir + " --progress plain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream summary_file(run_dir + "/summary.json");
  ASSERT_TRUE(summary_file) << r.output;
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["tokens"], 3 * 2 * 2 * 16);
  // The second host was started through the agent, as a remote one would be through ssh.
  std::ifstream agent_log(log);
  std::string first_host;
  agent_log >> first_host;
  EXPECT_EQ(first_host, "127.0.0.2");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::cli
