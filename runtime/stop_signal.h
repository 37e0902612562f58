// A graceful stop on SIGTERM, SIGINT and SIGUSR2 (cluster preemption, Ctrl-C, and `sluice
// launch`, which passes either of the first two on to the ranks as SIGUSR2: mpirun forwards
// SIGUSR2 but answers its own SIGTERM by killing the ranks a second later).
//
// The first such signal only records itself (and says so on stderr); a long-running command
// polls StopSignal() at a safe point and winds down: the trainer finishes the step on every rank,
// saves a checkpoint and exits. A second signal ends the process at once, by the signal's default
// action.
#pragma once

#include <string>

namespace sluice {

// Idempotent; once per process, before the work starts.
void InstallStopSignalHandlers();

// The first stop signal received (SIGTERM, SIGINT or SIGUSR2), or 0.
int StopSignal();

// "SIGTERM", "SIGINT", "SIGUSR2 (...)", or "signal N".
std::string StopSignalName(int signal);

namespace internal {
// Forgets a received signal (tests).
void ResetStopSignalForTesting();
}  // namespace internal

}  // namespace sluice
