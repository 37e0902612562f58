// The job ends when a rank cannot continue, and stops gracefully when asked, end to end through
// the built binary with real signals:
//   - a rank stopped (SIGSTOP) mid-step or inside a checkpoint save, of 2 and of 3 ranks: every
//     process is gone and `sluice launch` exits non-zero within run.comm_timeout plus the
//     documented grace (runtime/job_abort.h); the latest checkpoint still resumes;
//   - SIGTERM to `sluice launch` (and SIGINT to a single `sluice train`): the ranks finish the
//     step, checkpoint and exit with 128 + the signal; the run resumed from there is bit for bit
//     the uninterrupted one; a second signal ends the job at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/job_abort.h"
#include "tests/common/run_command.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using test_util::TempPath;
using test_util::WriteFile;

// Short, so that a stopped rank is noticed quickly, yet long enough for a healthy save's fsyncs
// on a loaded 2-core machine (3 ranks beside other tests).
constexpr double kCommTimeout = 6.0;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<nlohmann::json> MetricsLines(const fs::path& run_dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    // The writer may be half way through the last line.
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) lines.push_back(std::move(parsed));
  }
  return lines;
}

// A command run in the background with its output in a file.
class Background {
 public:
  Background(const std::string& command, const fs::path& output) : output_(output) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string line = "exec " + command + " > '" + output.string() + "' 2>&1";
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() {
    if (!exit_code_.has_value() && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  std::string output() const { return ReadText(output_); }

  // The exit code (128 + signal when a signal ended it), or nullopt if still running at the end.
  std::optional<int> WaitFor(double seconds) {
    const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(seconds));
    while (!exit_code_.has_value()) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
  }

 private:
  fs::path output_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Waits (up to a minute) until `done` holds.
template <typename Predicate>
bool Eventually(Predicate done) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Processes whose command line contains `marker` (the run's unique directory), with their MPI
// world rank (-1 for mpirun and the launcher).
struct RunProcess {
  pid_t pid;
  int rank;
};
std::vector<RunProcess> ProcessesOf(const std::string& marker) {
  std::vector<RunProcess> found;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadText(entry.path() / "cmdline");
    if (cmdline.find(marker) == std::string::npos) continue;
    const std::string environ = ReadText(entry.path() / "environ");
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    int rank = -1;
    for (size_t at = 0; at < environ.size(); at = environ.find('\0', at) + 1) {
      if (environ.compare(at, key.size(), key) == 0)
        rank = std::stoi(environ.substr(at + key.size()));
      if (environ.find('\0', at) == std::string::npos) break;
    }
    found.push_back({static_cast<pid_t>(std::stoi(name)), rank});
  }
  return found;
}

class RankFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempPath("");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string corpus =
        WriteFile((dir_ / "corpus.txt").string(), test_util::SyntheticCorpus(32768));
    config_ = WriteFile((dir_ / "tiny.yaml").string(),
                        test_util::TinyGptYaml(corpus, (dir_ / "unused").string()));
  }

  // `sluice train` on the tiny model into `run`, with `sets` (--set items).
  std::string TrainArgs(const fs::path& run, const std::vector<std::string>& sets) const {
    std::string args = "train --config " + config_ + " --run-dir " + run.string() +
                       " --progress plain --set run.comm_timeout=" + std::to_string(kCommTimeout);
    for (const std::string& set : sets) args += " --set " + set;
    return args;
  }
  std::string Launch(int ranks, const std::string& train_args) const {
    return std::string(SLUICE_BINARY) + " launch -n " + std::to_string(ranks) + " -- " + train_args;
  }

  static int64_t LatestStep(const fs::path& run) {
    const std::string latest = ReadText(run / "checkpoints" / "latest");
    const size_t at = latest.find("step_");
    return at == std::string::npos ? -1 : std::stoll(latest.substr(at + 5));
  }

  // The run's latest checkpoint resumes (on as many ranks: the global batch stays) and trains a
  // step past it.
  void ExpectLatestResumes(int ranks, const fs::path& run) {
    const int64_t step = LatestStep(run);
    ASSERT_GT(step, 0) << ReadText(run / "checkpoints" / "latest");
    const test_cli::CommandResult r = test_cli::RunCommand(
        Launch(ranks, TrainArgs(run, {"run.steps=" + std::to_string(step + 1)}) + " --resume"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("step_" + std::to_string(step)), std::string::npos) << r.output;
  }

  // Stops `rank` with SIGSTOP once `ready` holds (or the run does it to itself through
  // `fault_point`), then expects the whole job gone within the bound.
  void ExpectStoppedRankEndsTheJob(int ranks, int rank, const std::string& fault_point) {
    const fs::path run = dir_ / "run";
    const std::string env =
        fault_point.empty() ? "" : "env SLUICE_FAULT_POINT=" + fault_point + " ";
    Background job(
        env + Launch(ranks, TrainArgs(run, {"run.steps=100000", "checkpoint.save_interval=5"})),
        dir_ / "job.log");
    Clock::time_point stopped;
    if (fault_point.empty()) {
      ASSERT_TRUE(Eventually([&] { return LatestStep(run) >= 5 && MetricsLines(run).size() >= 8; }))
          << job.output();
      for (const RunProcess& p : ProcessesOf(run.string())) {
        if (p.rank == rank) {
          ASSERT_EQ(::kill(p.pid, SIGSTOP), 0);
        }
      }
      stopped = Clock::now();
    } else {
      // The rank stops itself inside the save of step 10.
      ASSERT_TRUE(Eventually([&] { return MetricsLines(run).size() >= 10; })) << job.output();
      stopped = Clock::now();
    }
    const double bound = kCommTimeout + kJobAbortGraceSeconds + 5;
    const std::optional<int> exit_code = job.WaitFor(bound);
    const double took = std::chrono::duration<double>(Clock::now() - stopped).count();
    ASSERT_TRUE(exit_code.has_value()) << "still running " << bound << " s after the stop\n"
                                       << job.output();
    EXPECT_NE(*exit_code, 0) << job.output();
    EXPECT_LT(took, bound);
    EXPECT_NE(job.output().find("timed out"), std::string::npos) << job.output();
    EXPECT_NE(job.output().find("aborting the job"), std::string::npos) << job.output();
    std::vector<RunProcess> left;
    Eventually([&] {
      left = ProcessesOf(run.string());
      return left.empty();
    });
    EXPECT_TRUE(left.empty()) << left.size() << " process(es) of the run left, pid "
                              << (left.empty() ? 0 : left[0].pid);
    if (!fault_point.empty()) {
      EXPECT_EQ(LatestStep(run), 5) << "the save of step 10 never committed\n" << job.output();
    }
    ExpectLatestResumes(ranks, run);
  }

  fs::path dir_;
  std::string config_;
};

TEST_F(RankFaultTest, AStoppedRankOfTwoEndsTheJobMidStep) { ExpectStoppedRankEndsTheJob(2, 1, ""); }

TEST_F(RankFaultTest, AStoppedRankOfThreeEndsTheJobMidStep) {
  ExpectStoppedRankEndsTheJob(3, 2, "");
}

TEST_F(RankFaultTest, AStoppedWriterOfTwoEndsTheJobMidStep) {
  ExpectStoppedRankEndsTheJob(2, 0, "");
}

TEST_F(RankFaultTest, ARankOfTwoStoppedInsideASaveKeepsThePreviousCheckpoint) {
  ExpectStoppedRankEndsTheJob(2, 1, "checkpoint.rank_files_written:1:2:stop");
}

TEST_F(RankFaultTest, ARankOfThreeStoppedInsideASaveKeepsThePreviousCheckpoint) {
  ExpectStoppedRankEndsTheJob(3, 1, "checkpoint.rank_files_written:1:2:stop");
}

std::vector<double> Losses(const fs::path& run) {
  std::vector<double> losses;
  for (const nlohmann::json& line : MetricsLines(run)) losses.push_back(line["loss"].get<double>());
  return losses;
}

TEST_F(RankFaultTest, SigtermToLaunchStopsAfterTheStepAndTheResumedRunIsTheSame) {
  const std::vector<std::string> sets = {"run.steps=600",
                                         "checkpoint.dir=" + (dir_ / "stopped_ckpt").string()};
  const fs::path stopped = dir_ / "stopped";
  Background job(Launch(2, TrainArgs(stopped, sets)), dir_ / "job.log");
  ASSERT_TRUE(Eventually([&] { return MetricsLines(stopped).size() >= 3; })) << job.output();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  const std::optional<int> exit_code = job.WaitFor(60);
  ASSERT_TRUE(exit_code.has_value()) << job.output();
  EXPECT_EQ(*exit_code, 128 + SIGTERM) << job.output();
  const size_t done = MetricsLines(stopped).size();
  ASSERT_LT(done, 600u) << "the run ended before the signal arrived";
  EXPECT_NE(job.output().find("stopped by SIGUSR2"), std::string::npos) << job.output();
  EXPECT_NE(job.output().find("continue with --resume"), std::string::npos) << job.output();
  const std::string latest = ReadText(dir_ / "stopped_ckpt" / "latest");
  EXPECT_NE(latest.find("step_" + std::to_string(done)), std::string::npos) << latest;
  const nlohmann::json summary = nlohmann::json::parse(ReadText(stopped / "summary.json"));
  EXPECT_EQ(summary["steps"], done);
  EXPECT_EQ(summary["stopped_by"].get<std::string>().rfind("SIGUSR2", 0), 0u) << summary.dump();

  test_cli::CommandResult r =
      test_cli::RunCommand(Launch(2, TrainArgs(stopped, sets) + " --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test_cli::RunCommand(Launch(2, TrainArgs(dir_ / "straight", {"run.steps=600"})));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> resumed = Losses(stopped);
  const std::vector<double> straight = Losses(dir_ / "straight");
  ASSERT_EQ(resumed.size(), 600u);
  ASSERT_EQ(straight.size(), 600u);
  for (size_t i = 0; i < straight.size(); ++i) {
    ASSERT_EQ(resumed[i], straight[i]) << "step " << i + 1 << " (stopped after " << done << ")";
  }
}

TEST_F(RankFaultTest, ASecondSignalEndsTheJobAtOnce) {
  const fs::path run = dir_ / "run";
  Background job(Launch(2, TrainArgs(run, {"run.steps=100000"})), dir_ / "job.log");
  ASSERT_TRUE(Eventually([&] { return MetricsLines(run).size() >= 3; })) << job.output();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  const std::optional<int> exit_code = job.WaitFor(15);
  ASSERT_TRUE(exit_code.has_value()) << job.output();
  EXPECT_NE(*exit_code, 0) << job.output();
  EXPECT_TRUE(Eventually([&] { return ProcessesOf(run.string()).empty(); }));
}

TEST_F(RankFaultTest, SigintToOneRankTrainingSavesAndExits) {
  const fs::path run = dir_ / "run";
  Background job(std::string(SLUICE_BINARY) + " " +
                     TrainArgs(run, {"run.steps=100000", "checkpoint.save_interval=1000"}),
                 dir_ / "job.log");
  ASSERT_TRUE(Eventually([&] { return MetricsLines(run).size() >= 3; })) << job.output();
  ASSERT_EQ(::kill(job.pid(), SIGINT), 0);
  const std::optional<int> exit_code = job.WaitFor(30);
  ASSERT_TRUE(exit_code.has_value()) << job.output();
  EXPECT_EQ(*exit_code, 128 + SIGINT) << job.output();
  EXPECT_NE(job.output().find("stopped by SIGINT"), std::string::npos) << job.output();
  EXPECT_EQ(LatestStep(run), static_cast<int64_t>(MetricsLines(run).size()));
}

}  // namespace
}  // namespace sluice::train
