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
#pragma once

#include <string>
#include <string_view>
#include <vector>

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
};

// InvalidArgument for fewer than 1 rank, an empty command, or more ranks than cores with
// oversubscription refused.
Result<std::vector<std::string>> BuildMpirunCommand(const LaunchRequest& request);

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
