#include "cli/launch_supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/foreign_call.h"

namespace sluice::cli {
namespace {

std::atomic<pid_t> g_child{0};
std::atomic<int> g_requests{0};
std::atomic<int> g_first_signal{0};

void PassOn(int signal) {
  const pid_t child = g_child.load();
  if (child <= 0) return;
  const bool first = g_requests.fetch_add(1) == 0;
  if (first) g_first_signal.store(signal);
  static constexpr char kFirst[] =
      "sluice launch: stop requested: the ranks finish the step, checkpoint and exit (again to "
      "kill them at once)\n";
  static constexpr char kSecond[] = "sluice launch: killing the ranks\n";
  const ssize_t ignored = first ? ::write(STDERR_FILENO, kFirst, sizeof(kFirst) - 1)
                                : ::write(STDERR_FILENO, kSecond, sizeof(kSecond) - 1);
  (void)ignored;
  ::kill(child, first ? SIGUSR2 : SIGTERM);
}

constexpr int kPassedOn[] = {SIGTERM, SIGINT, SIGHUP};

}  // namespace

Result<int> RunSupervised(const std::vector<std::string>& argv) {
  std::vector<char*> raw;
  for (const std::string& word : argv) raw.push_back(const_cast<char*>(word.c_str()));
  raw.push_back(nullptr);
  std::fflush(nullptr);

  // Blocked until the child's pid is known, so that no request is lost in between.
  sigset_t passed_on, previous;
  sigemptyset(&passed_on);
  for (int signal : kPassedOn) sigaddset(&passed_on, signal);
  sigprocmask(SIG_BLOCK, &passed_on, &previous);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    const int err = errno;
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    return UnavailableError("cannot run {}: fork: {}", argv[0], internal::ErrnoText(err));
  }
  if (child == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // the launcher is already gone
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    ::execv(raw[0], raw.data());
    const int err = errno;
    std::fprintf(stderr, "error: cannot run %s: execv: %s\n", raw[0], std::strerror(err));
    ::_exit(127);
  }
  g_child.store(child);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = PassOn;
  sigemptyset(&action.sa_mask);
  for (int signal : kPassedOn) sigaction(signal, &action, nullptr);
  sigprocmask(SIG_SETMASK, &previous, nullptr);

  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    return InternalError("waiting for {} (pid {}): {}", argv[0], child, internal::ErrnoText(err));
  }
  const int exit_code = WIFEXITED(status)     ? WEXITSTATUS(status)
                        : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                              : 1;
  // The ranks stopped for the SIGUSR2 this launcher sent: report the signal it was sent.
  const int first = g_first_signal.load();
  return first != 0 && exit_code == 128 + SIGUSR2 ? 128 + first : exit_code;
}

}  // namespace sluice::cli
