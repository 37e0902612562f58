// `sluice launch --hostfile` on two hosts of one machine: localhost and the loopback alias
// 127.0.0.2, which Open MPI takes for another node and reaches through its remote launch agent.
// There is no ssh here: the agent is a script the test writes that drops the host name and runs
// the command locally. The ranks of the two "hosts" talk over TCP, as on two machines. One rank
// per host: with two, Open MPI 4.1 itself crashes in this set-up (a plain MPI program that dups
// communicators and allocates shared windows does too), presumably as both "hosts" have the
// machine's one host name, which names its shared-memory segments.
//
// - a two-rank run across the hosts completes;
// - every ZeRO stage trains across the hosts to the losses of the same run on one host, bit for
//   bit (two ranks: every sum has two terms, equal in either order), well within
//   run.comm_timeout;
// - a rank stopped on the other host is named by the collective that times out (its process
//   answers no arrival query), and the job ends instead of hanging.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/launch_command.h"
#include "tests/common/run_command.h"

namespace sluice::cli {
namespace {

constexpr const char* kOtherHost = "127.0.0.2";

std::string Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

// Empty when this machine answers on kOtherHost (Linux routes all of 127.0.0.0/8 to lo).
std::string WhyNoOtherHost() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "no TCP socket could be created";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  ::inet_pton(AF_INET, kOtherHost, &address.sin_addr);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return bound ? "" : std::string(kOtherHost) + " is not a loopback address of this machine";
}

struct Launched {
  test_cli::CommandResult result;
  double seconds = 0;
};

class TwoHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Result<std::string> mpirun = FindMpirun(); !mpirun.ok()) {
      GTEST_SKIP() << mpirun.status().ToString();
    }
    if (std::string why = WhyNoOtherHost(); !why.empty()) {
      GTEST_SKIP() << "two hosts on one machine need " << kOtherHost << ": " << why;
    }
    // "TrainsAcrossHostsAsOnOneHost/stage3" -> "..._stage3": one directory per test.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice_hosts_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    agent_log_ = (dir_ / "agent.log").string();
    const std::string agent = Write(dir_ / "agent.sh", "#!/bin/sh\necho \"$1\" >> " + agent_log_ +
                                                           "\nshift\nexec /bin/sh -c \"$*\"\n");
    ::chmod(agent.c_str(), 0755);
    hostfile_ = Write(dir_ / "hosts", std::string("# this machine, twice\nlocalhost slots=1\n") +
                                          kOtherHost + " slots=1\n");
    std::string corpus;
    for (int i = 0; i < 3000; ++i) {
      corpus += "pack my box with five dozen jugs " + std::to_string(i) + "\n";
    }
    corpus_ = Write(dir_ / "corpus.txt", corpus);
    // Loopback only: Open MPI leaves lo out of its TCP interfaces by default.
    launcher_args_ = "--launcher-args '--mca plm_rsh_agent " + agent +
                     " --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo'";
  }

  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // A config of the tiny model; `extra` is more YAML.
  std::string Config(const std::string& name, const std::string& model, const std::string& extra) {
    return Write(dir_ / name,
                 "train_micro_batch_size_per_gpu: 2\ngradient_accumulation_steps: 1\n"
                 "optimizer: {type: AdamW, params: {lr: 1.0e-3}}\n"
                 "model: " +
                     model + "\ndata: {train_path: " + corpus_ +
                     ", format: text, val_fraction: 0}\n"
                     "device: {type: cpu, memory_limit: 64MiB, threads: 1}\n" +
                     extra);
  }

  // `sluice launch` with `placement` ("--hostfile FILE ..." or "-n 2"), bounded by `limit`
  // seconds so that a hang fails the test instead of stalling it.
  Launched Launch(const std::string& placement, const std::string& config,
                  const std::string& run_dir, int limit, const std::string& prefix = "") {
    const auto start = std::chrono::steady_clock::now();
    Launched launched;
    launched.result = test_cli::RunSluice("launch " + placement + " -- train --config " + config +
                                              " --run-dir " + run_dir + " --progress plain",
                                          prefix + " timeout -k 5 " + std::to_string(limit));
    launched.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return launched;
  }
  std::string OnTwoHosts() const { return "--hostfile " + hostfile_ + " " + launcher_args_; }

  // The hosts the agent started daemons on, in order.
  std::vector<std::string> AgentHosts() const {
    std::ifstream log(agent_log_);
    std::vector<std::string> hosts;
    for (std::string host; log >> host;) hosts.push_back(host);
    return hosts;
  }

  std::filesystem::path dir_;
  std::string agent_log_;
  std::string hostfile_;
  std::string corpus_;
  std::string launcher_args_;
};

// The loss of every step, as metrics.jsonl records it.
std::vector<double> Losses(const std::string& run_dir) {
  std::ifstream metrics(run_dir + "/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(metrics, line);) {
    losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  }
  return losses;
}

constexpr const char* kTinyModel =
    "{family: gpt2, n_layer: 1, n_head: 2, d_model: 16, seq_len: 16, vocab_size: 256}";

TEST_F(TwoHostsTest, TrainsOnTwoHostsThroughAHostfile) {
  const std::string config =
      Config("tiny.yaml", kTinyModel, "run: {steps: 3, eval_interval: 0, comm_timeout: 60}\n");
  const std::string run_dir = (dir_ / "run").string();
  const Launched launched = Launch(OnTwoHosts(), config, run_dir, 100);
  ASSERT_EQ(launched.result.exit_code, 0) << launched.result.output;
  std::ifstream summary_file(run_dir + "/summary.json");
  ASSERT_TRUE(summary_file) << launched.result.output;
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["tokens"], 3 * 2 * 2 * 16);
  // The second host was started through the agent, as a remote one would be through ssh.
  EXPECT_EQ(AgentHosts(), std::vector<std::string>{kOtherHost});
}

class TwoHostsStageTest : public TwoHostsTest, public ::testing::WithParamInterface<int> {};

TEST_P(TwoHostsStageTest, TrainsAcrossHostsAsOnOneHost) {
  const int stage = GetParam();
  constexpr int kSteps = 10;
  constexpr int kCommTimeout = 60;
  // Two blocks, so that stage 3 gathers units one after another, and LayerNorm parameters
  // below the persistence threshold (10 * d_model), which it gathers after every step.
  const std::string config =
      Config("stage.yaml",
             "{family: gpt2, n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 256}",
             "zero_optimization: {stage: " + std::to_string(stage) +
                 "}\nrun: {steps: " + std::to_string(kSteps) +
                 ", eval_interval: 0, comm_timeout: " + std::to_string(kCommTimeout) + "}\n");
  const std::string two_hosts = (dir_ / "two_hosts").string();
  const std::string one_host = (dir_ / "one_host").string();

  const Launched across = Launch(OnTwoHosts(), config, two_hosts, 2 * kCommTimeout);
  ASSERT_EQ(across.result.exit_code, 0) << across.result.output;
  EXPECT_EQ(AgentHosts(), std::vector<std::string>{kOtherHost});
  // A collective that waits for what never comes ends the run at run.comm_timeout; a healthy
  // run of ten tiny steps takes a second or two.
  EXPECT_LT(across.seconds, kCommTimeout / 2.0) << across.result.output;

  const Launched local = Launch("-n 2", config, one_host, 2 * kCommTimeout);
  ASSERT_EQ(local.result.exit_code, 0) << local.result.output;

  const std::vector<double> expected = Losses(one_host);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps)) << local.result.output;
  EXPECT_EQ(Losses(two_hosts), expected);
}

INSTANTIATE_TEST_SUITE_P(Stages, TwoHostsStageTest, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "stage" + std::to_string(info.param);
                         });

TEST_F(TwoHostsTest, RankStoppedOnTheOtherHostIsNamedAndTheJobEnds) {
  constexpr int kCommTimeout = 3;
  // Rank 1, on the other host, stops (SIGSTOP) once its shard files of the step-2 checkpoint are
  // written; rank 0 then waits for it in the collective that agrees the save succeeded.
  const std::string config =
      Config("stop.yaml", kTinyModel,
             "zero_optimization: {stage: 3}\ncheckpoint: {save_interval: 2}\n"
             "run: {steps: 3, eval_interval: 0, comm_timeout: " +
                 std::to_string(kCommTimeout) + "}\n");
  const Launched launched = Launch(OnTwoHosts(), config, (dir_ / "run").string(), 90,
                                   "SLUICE_FAULT_POINT=checkpoint.rank_files_written:1:1:stop");
  EXPECT_NE(launched.result.exit_code, 0) << launched.result.output;
  EXPECT_NE(launched.result.output.find("timed out after 3.0 s: ranks 1 did not answer the "
                                        "arrival query"),
            std::string::npos)
      << launched.result.output;
  // The timeout, the arrival query's grace, and the abort: no wait for the stopped rank.
  EXPECT_LT(launched.seconds, 30) << launched.result.output;
}

}  // namespace
}  // namespace sluice::cli
