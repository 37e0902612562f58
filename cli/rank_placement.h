// Where a rank stands in its job, as its launcher says: mpirun sets OMPI_COMM_WORLD_RANK, _SIZE
// and _LOCAL_RANK; srun sets SLURM_PROCID, SLURM_STEP_NUM_TASKS (SLURM_NTASKS) and
// SLURM_LOCALID. MPI decides the communicator's ranks, but a process that srun started without
// an MPI plugin (no `--mpi=pmix`) becomes a world of one while srun started several: every task
// would train alone on the whole data. CheckWorldAgainstLauncher catches that before any work.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice::cli {

// Environment variables by name (a test passes its own; ProcessEnvironment() is the real one).
using Environment = std::map<std::string, std::string, std::less<>>;
Environment ProcessEnvironment();
// The value of `name` in `env`, or null.
const std::string* FindVariable(const Environment& env, std::string_view name);

struct RankPlacement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;     // the rank's index among the ranks of its node
  std::string launcher;   // "mpirun" or "srun"
  std::string variables;  // the variables read, for messages
};

// The placement the environment describes; nullopt for a process no launcher started (a plain
// command line, or the batch script of an sbatch job, which has SLURM_PROCID but no job step).
// mpirun's variables win over SLURM's (mpirun inside an allocation sets both). InvalidArgument
// naming the variable for a value that is not a number, or a rank outside the world.
Result<std::optional<RankPlacement>> RankPlacementFromEnvironment(const Environment& env);

// FailedPrecondition when MPI's world (`mpi_rank` of `mpi_size`) is not the one the launcher
// started, naming both and what to do (srun --mpi=pmix, or sluice launch); OK otherwise and
// when no launcher is known.
Status CheckWorldAgainstLauncher(const std::optional<RankPlacement>& placement, int mpi_rank,
                                 int mpi_size);

// The two above for this process: to call once MPI's world exists.
Status CheckWorldAgainstLauncher(int mpi_rank, int mpi_size);

}  // namespace sluice::cli
