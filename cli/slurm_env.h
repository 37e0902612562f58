// SLURM for `sluice launch`: the allocation as its variables describe it, and the srun command
// that starts the ranks on it.
//
// Inside `salloc` or an sbatch script, SLURM_JOB_ID, SLURM_JOB_NODELIST ("node[01-03,07]"),
// SLURM_NTASKS and SLURM_TASKS_PER_NODE ("2(x3),1") describe the allocation; `sluice launch --
// train ...` then runs
//
//   srun --ntasks=T --nodes=N --kill-on-bad-exit=1 --mpi=pmix --export=ALL,OMP_NUM_THREADS=k
//        /path/to/sluice train ...
//
// srun starts every task and hands MPI its ranks through PMIx (--mpi=pmix; launcher arguments
// with their own --mpi replace it); --kill-on-bad-exit ends the job when one rank fails, as
// mpirun does. Each task learns its place from SLURM_PROCID, SLURM_LOCALID and
// SLURM_STEP_NUM_TASKS (rank_placement.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/rank_placement.h"
#include "runtime/status.h"

namespace sluice::cli {

// SLURM's host list syntax: "node[01-03,07],gpu-[1-2]-ib" -> node01 node02 node03 node07
// gpu-1-ib gpu-2-ib (zero padding kept; several bracket groups multiply). InvalidArgument naming
// the text for an unbalanced bracket, a reversed or non-numeric range.
Result<std::vector<std::string>> ExpandNodeList(std::string_view text);

// SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1.
Result<std::vector<int>> ExpandTasksPerNode(std::string_view text);

struct SlurmJob {
  std::string job_id;
  std::vector<std::string> nodes;   // SLURM_JOB_NODELIST, expanded
  int ntasks = 0;                   // SLURM_NTASKS (0: not set)
  std::vector<int> tasks_per_node;  // SLURM_TASKS_PER_NODE, one per node (empty: not set)
  int cpus_per_task = 0;            // SLURM_CPUS_PER_TASK (0: not set)
  int cpus_on_node = 0;             // SLURM_CPUS_ON_NODE (0: not set)
};

// The allocation this process runs in; nullopt outside SLURM (no SLURM_JOB_ID). InvalidArgument
// naming the variable and its value when one cannot be read, or the node and task lists
// disagree.
Result<std::optional<SlurmJob>> SlurmJobFromEnvironment(const Environment& env);

struct SrunRequest {
  SlurmJob job;
  int ranks = 0;  // 0: SLURM_NTASKS (else one per node)
  std::vector<std::string> command;
  std::string srun = "srun";
  std::string sluice;
  std::string bind = "auto";  // auto (the site's default), core, none
  std::vector<std::string> launcher_args;
  // Names of the caller's environment variables (OMP_NUM_THREADS given: kept as it is).
  std::vector<std::string> environment_names;
};

// The srun command line above. InvalidArgument for an empty command, or more ranks than the
// allocation has tasks (naming SLURM_NTASKS and how to ask for more).
Result<std::vector<std::string>> BuildSrunCommand(const SrunRequest& request);

// "4 ranks on 2 nodes of SLURM job 123: node01 (2), node02 (2)"
std::string DescribeSrunPlan(const SrunRequest& request);

}  // namespace sluice::cli
