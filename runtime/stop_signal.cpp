#include "runtime/stop_signal.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace sluice {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR2};

std::atomic<int> g_signal{0};

void OnStopSignal(int signal) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, signal)) {
    // The second one: the default action, at once.
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  // Only async-signal-safe calls here: a fixed message and write(2).
  static constexpr char kMessage[] =
      "sluice: stop requested: finishing the current step, then saving a checkpoint (if one is "
      "configured) and exiting; send the signal again to exit at once\n";
  const ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
}

}  // namespace

void InstallStopSignalHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    // SA_RESTART: an interrupted read or write resumes instead of failing with EINTR.
    action.sa_flags = SA_RESTART;
    for (int signal : kStopSignals) sigaction(signal, &action, nullptr);
  });
}

int StopSignal() { return g_signal.load(std::memory_order_relaxed); }

std::string StopSignalName(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR2:
      return "SIGUSR2 (a stop request, as sluice launch passes SIGTERM and SIGINT on)";
    default:
      return fmt::format("signal {}", signal);
  }
}

namespace internal {
void ResetStopSignalForTesting() { g_signal.store(0); }
}  // namespace internal

}  // namespace sluice
