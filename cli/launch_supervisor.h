// `sluice launch` runs mpirun as its child instead of becoming it, to turn a stop request into one
// the ranks can act on: mpirun answers SIGTERM and SIGINT by killing every rank a second later,
// but forwards SIGUSR2, which the ranks take as a graceful stop (runtime/stop_signal.h).
//
// mpirun runs in a process group of its own (so a Ctrl-C at the terminal reaches the launcher
// only) and dies with the launcher. The first SIGTERM, SIGINT or SIGHUP the launcher receives
// reaches mpirun as SIGUSR2: the ranks finish the step, checkpoint and exit. A second one reaches
// it as SIGTERM: the job is killed at once.
#pragma once

#include <string>
#include <vector>

#include "runtime/status.h"

namespace sluice::cli {

// Runs argv (argv[0] a path) as above and returns the exit code to exit with: the child's, or
// 128 + the signal that ended it; 128 + the launcher's own signal when the ranks stopped for it.
Result<int> RunSupervised(const std::vector<std::string>& argv);

}  // namespace sluice::cli
