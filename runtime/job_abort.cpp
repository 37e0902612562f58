#include "runtime/job_abort.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/logging.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// One timer per process: the earliest deadline armed wins. Never destroyed, so that its thread
// may still be waiting while the process exits.
struct AbortTimer {
  std::mutex mutex;
  std::condition_variable wake;
  std::optional<Clock::time_point> deadline;
  Status reason;
  bool started = false;

  void Arm(Clock::time_point when, Status why) {
    std::lock_guard lock(mutex);
    if (deadline.has_value() && *deadline <= when) return;
    deadline = when;
    reason = std::move(why);
    if (!started) {
      started = true;
      std::thread([this] { Run(); }).detach();
    }
    wake.notify_one();
  }

  void Run() {
    std::unique_lock lock(mutex);
    // Re-reads the deadline after every wake: a later Arm may have brought it forward.
    while (Clock::now() < *deadline) wake.wait_until(lock, *deadline);
    const Status why = reason;
    lock.unlock();
    AbortJob(why);
  }
};

AbortTimer& Timer() {
  static AbortTimer* timer = new AbortTimer();
  return *timer;
}

std::atomic<JobAbortFunction> g_abort{nullptr};
std::atomic<bool> g_abort_on_timeout{false};
std::atomic<bool> g_pending{false};

Clock::time_point SecondsFromNow(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

void SetJobAbortFunction(JobAbortFunction abort) { g_abort.store(abort); }

void EnableJobAbortOnCommTimeout() { g_abort_on_timeout.store(true); }

void NoteCommTimeout(const Status& error) {
  if (!g_abort_on_timeout.load() || g_pending.exchange(true)) return;
  Timer().Arm(SecondsFromNow(kJobAbortGraceSeconds),
              Status(error).WithContext(fmt::format(
                  "a collective timed out and the error did not reach the top within {} s",
                  kJobAbortGraceSeconds)));
}

bool JobAbortPending() { return g_pending.load(); }

void AbortJob(const Status& error, int exit_code) {
  std::fprintf(stderr, "error: %s\n", error.ToString().c_str());
  SLUICE_LOG(kError, "job", "aborting the job: every rank is ended (exit code {})", exit_code);
  std::fflush(nullptr);
  if (JobAbortFunction abort = g_abort.load(); abort != nullptr) abort(exit_code);
  ::_exit(exit_code);
}

Status FinishRankCommand(Status status, double comm_timeout_seconds) {
  if (!status.ok() && JobAbortPending()) AbortJob(status);
  Timer().Arm(
      SecondsFromNow(comm_timeout_seconds + kJobAbortGraceSeconds),
      DeadlineExceededError(
          "the other ranks did not finish within run.comm_timeout ({} s) + {} s after "
          "this rank {}; a rank is stopped or stuck",
          comm_timeout_seconds, kJobAbortGraceSeconds, status.ok() ? "finished" : "failed"));
  return status;
}

}  // namespace sluice
