// The mpirun command line `sluice launch` runs: N ranks of this sluice binary on one node.
//
//   mpirun -np N [--allow-run-as-root] [--oversubscribe] --bind-to core --map-by slot:PE=k
//          --mca btl self,vader --stdin none -x OMP_NUM_THREADS=k -x SLUICE_... /path/to/sluice
//          train ...
//
// Root needs --allow-run-as-root (Open MPI refuses otherwise); more ranks than usable cores need
// --oversubscribe. Binding: each rank gets k = cores / N cores of its own (--map-by slot:PE=k
// --bind-to core) when every rank can have one, otherwise nothing is bound. OpenMP in each rank
// uses its k cores (OMP_NUM_THREADS, unless already set). SLUICE_* and OMP_* variables of the
// caller's environment reach every rank (-x NAME).
//
// With hosts (a hostfile, hostfile.h) the ranks go to them instead, in slot order:
//
//   mpirun -np N --host worker-1:4,worker-2:4 --map-by slot --bind-to none
//          --mca btl self,vader,tcp ... /path/to/sluice train ...
//
// Open MPI starts its daemon on every host over ssh (or what plm_rsh_agent names), so the
// sluice binary and the data must be at the same paths there. Ranks of one host share memory
// (vader); hosts talk over TCP. Cores are not bound, and each rank's OpenMP share assumes the
// hosts have this machine's cores: cores / (the most slots of any host).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/hostfile.h"
#include "runtime/status.h"

namespace sluice::cli {

enum class Oversubscribe { kAuto, kYes, kNo };
enum class Binding { kAuto, kCore, kNone };

struct LaunchRequest {
  int ranks = 1;
  Oversubscribe oversubscribe = Oversubscribe::kAuto;
  Binding binding = Binding::kAuto;
  std::vector<std::string>
      command;         // a sluice command and its arguments: {"train", "--config", ...}
  std::string mpirun;  // path of mpirun
  std::string sluice;  // path of the sluice binary every rank runs
  bool root = false;   // effective uid 0
  int cores = 1;       // cores this process may run on
  // Names of the caller's environment variables: SLUICE_* and OMP_* ones are passed on.
  std::vector<std::string> environment_names;
  // Empty: every rank on this node. Else the hosts and slots to run on (ranks 0 means their
  // total).
  std::vector<HostSlots> hosts;
  // Passed to mpirun before the sluice binary (--launcher-args), e.g. --mca settings.
  std::vector<std::string> launcher_args;
};

// InvalidArgument for fewer than 1 rank, an empty command, or more ranks than cores (or than the
// hosts' slots) with oversubscription refused.
Result<std::vector<std::string>> BuildMpirunCommand(const LaunchRequest& request);

// For --dry-run: "2 ranks on 2 hosts: localhost (1), 127.0.0.2 (1)", "4 ranks on this node, 2
// cores each".
std::string DescribeMpirunPlan(const LaunchRequest& request);

// The first executable `name` in the colon-separated `search_path`; NotFound naming the
// directories searched.
Result<std::string> FindExecutable(std::string_view name, std::string_view search_path);

// mpirun's path: $SLUICE_MPIRUN when set, else `mpirun` on $PATH; NotFound says which Debian
// package provides it (openmpi-bin).
Result<std::string> FindMpirun();

// Cores this process may run on (its CPU affinity), at least 1.
int UsableCores();

// Names (before '=') of the variables in the process environment.
std::vector<std::string> EnvironmentNames();

// For --dry-run: each word quoted for a POSIX shell when it needs it.
std::string ShellJoin(const std::vector<std::string>& words);

}  // namespace sluice::cli
