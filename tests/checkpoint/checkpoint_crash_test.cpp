// kill -9 during checkpoint saves: a child process saves checkpoints in a loop and is killed at
// random moments (and, deterministically, at each point of the commit sequence). After every
// kill `latest` opens and verifies completely, holds the data of the step it names, never goes
// back, and every committed step directory is complete; the next save removes the leftovers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace sluice::checkpoint {
namespace {

using testing::FullValues;
using testing::SaveWorld;
using testing::TempDir;

// Small, so that a save takes a few milliseconds and 50 kills fit in a few seconds.
std::vector<testing::TensorSpec> CrashModel() {
  return {{"model.embed_tokens.weight", Shape{128, 64}},
          {"model.layers.0.self_attn.q_proj.weight", Shape{64, 64}},
          {"model.norm.weight", Shape{64}}};
}

constexpr int kKeepLast = 2;

// Seeds are the step, so a checkpoint's contents prove which step they belong to.
[[noreturn]] void SaveForever(const std::filesystem::path& dir) {
  auto latest = ReadLatestStep(dir);
  int64_t step = latest.ok() && latest->has_value() ? **latest + 1 : 1;
  for (;; ++step) {
    auto result = SaveWorld(dir, step, 2, CrashModel(), static_cast<uint64_t>(step), kKeepLast);
    if (!result.all_ok()) _exit(3);
  }
}

// Full validation of one committed step directory written with seed == step.
void ExpectComplete(const std::filesystem::path& step_dir, int64_t step) {
  auto ckpt = CheckpointReader::Open(step_dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_EQ((*ckpt)->manifest().step, step);
  Status verified = (*ckpt)->VerifyAll();
  ASSERT_TRUE(verified.ok()) << verified.ToString();
  const auto model = CrashModel();
  for (StateKind kind : kAllStateKinds) {
    for (size_t i = 0; i < model.size(); ++i) {
      const int64_t numel = model[i].shape.numel();
      std::vector<float> got(numel);
      ASSERT_TRUE((*ckpt)->ReadRange(kind, model[i].name, 0, numel, got.data()).ok());
      ASSERT_EQ(got, FullValues(static_cast<uint64_t>(step), kind, i, numel))
          << step_dir << " " << model[i].name;
    }
  }
}

// Returns the step `latest` names (0 when none yet) after checking everything on disk.
int64_t ValidateAfterKill(const std::filesystem::path& dir, int64_t previous_latest) {
  auto latest = ReadLatestStep(dir);
  EXPECT_TRUE(latest.ok()) << latest.status().ToString();
  if (!latest.ok() || !latest->has_value()) {
    EXPECT_EQ(previous_latest, 0) << "latest disappeared";
    return 0;
  }
  const int64_t step = **latest;
  EXPECT_GE(step, previous_latest) << "latest went back";
  ExpectComplete(dir / StepDirName(step), step);
  auto steps = ListCommittedSteps(dir);
  EXPECT_TRUE(steps.ok());
  for (int64_t s : *steps) ExpectComplete(dir / StepDirName(s), s);
  // The previous checkpoint survives until kKeepLast newer ones exist.
  if (previous_latest > 0 && step - previous_latest < kKeepLast) {
    EXPECT_TRUE(std::filesystem::exists(dir / StepDirName(previous_latest)))
        << "lost step " << previous_latest;
  }
  return step;
}

bool HasStaging(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (IsStagingName(entry.path().filename().string())) return true;
  }
  return false;
}

// A kill -9 is a process crash: what survives it is the page cache, in the order the system
// calls ran, whatever fsync did. tmpfs keeps the test about that order instead of about the
// disk's fsync latency (a process killed inside fsync only dies when fsync returns, and shared
// CI disks stall for seconds). Power loss is what the fsyncs are for; no unit test can cut it.
std::filesystem::path CrashTestBase() {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) {
    return "/dev/shm";
  }
  return std::filesystem::temp_directory_path();
}

TEST(CheckpointCrashTest, KillNineAtRandomMomentsNeverTearsOrLosesACheckpoint) {
  TempDir tmp(CrashTestBase());
  // Kill within 1.5 save durations (fsync speed varies by disk): most kills land
  // inside a save, the rest let saves commit so that `latest` moves on.
  TempDir probe(CrashTestBase());
  const auto probe_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(SaveWorld(probe.path(), 1, 2, CrashModel(), 1, kKeepLast).all_ok());
  const int save_us = static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(
                                           std::chrono::steady_clock::now() - probe_start)
                                           .count());
  std::mt19937 rng(20240607);
  std::uniform_int_distribution<int> delay_us(0, std::min(3 * save_us / 2, 60000));
  int64_t latest = 0;
  int killed_mid_save = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int kill = 0; kill < 50; ++kill) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) SaveForever(tmp.path());
    if (kill % 5 == 4) {
      // Every fifth kill waits for a commit first, so `latest` moves on even when the disk
      // stalls longer than the delays.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < deadline) {
        auto now = ReadLatestStep(tmp.path());
        if (now.ok() && now->has_value() && **now > latest) break;
        usleep(500);
      }
    }
    usleep(delay_us(rng));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saving child exited with " << WEXITSTATUS(status);
    if (HasStaging(tmp.path())) ++killed_mid_save;
    latest = ValidateAfterKill(tmp.path(), latest);
    if (HasFatalFailure() || HasFailure()) return;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("one save %.1f ms; 50 kills in %.2f s, %d mid-save, latest step %lld\n",
              save_us / 1000.0, seconds, killed_mid_save, static_cast<long long>(latest));
  EXPECT_GT(latest, 0);
  EXPECT_GT(killed_mid_save, 0) << "no kill landed inside a save: the test proves nothing";
  // The next save cleans up whatever the last kill left.
  ASSERT_TRUE(SaveWorld(tmp.path(), latest + 1, 2, CrashModel(), latest + 1, kKeepLast).all_ok());
  EXPECT_FALSE(HasStaging(tmp.path()));
  ExpectComplete(tmp.path() / StepDirName(latest + 1), latest + 1);
}

TEST(CheckpointCrashTest, KillAtEachPointOfTheCommitSequence) {
  const char* points[] = {"files_written", "manifest_written", "renamed", "latest_updated",
                          "pruned"};
  for (const char* point : points) {
    TempDir tmp(CrashTestBase());
    ASSERT_TRUE(SaveWorld(tmp.path(), 1, 1, CrashModel(), 1, 1).all_ok());
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const auto model = CrashModel();
      std::vector<std::vector<float>> storage;
      auto tensors = testing::RankTensors(model, 2, 0, 1, &storage);
      SaveRequest request;
      request.checkpoints_dir = tmp.path();
      request.step = 2;
      request.keep_last = 1;
      request.progress_hook = [point](std::string_view at) {
        if (at == point) ::raise(SIGKILL);
      };
      (void)SaveCheckpoint(request, tensors, {});
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << point;
    const bool committed =
        std::string_view(point) != "files_written" && std::string_view(point) != "manifest_written";
    const int64_t latest = **ReadLatestStep(tmp.path());
    const bool latest_moved =
        std::string_view(point) == "latest_updated" || std::string_view(point) == "pruned";
    EXPECT_EQ(latest, latest_moved ? 2 : 1) << point;
    ExpectComplete(tmp.path() / StepDirName(latest), latest);
    EXPECT_EQ(std::filesystem::exists(tmp.path() / "step_2"), committed) << point;
    if (committed) ExpectComplete(tmp.path() / "step_2", 2);
    // Pruning runs only after `latest` moved: the old checkpoint is there until then.
    if (!latest_moved || std::string_view(point) == "latest_updated") {
      EXPECT_TRUE(std::filesystem::exists(tmp.path() / "step_1")) << point;
    }
    ASSERT_TRUE(SaveWorld(tmp.path(), 3, 1, CrashModel(), 3, 1).all_ok());
    EXPECT_FALSE(HasStaging(tmp.path())) << point;
    EXPECT_EQ(**ReadLatestStep(tmp.path()), 3);
  }
}

}  // namespace
}  // namespace sluice::checkpoint
