#include "cli/rank_placement.h"

#include <fmt/format.h>

#include <charconv>

extern char** environ;

namespace sluice::cli {
namespace {

Result<int> IntVariable(const Environment& env, std::string_view name) {
  const std::string* text = FindVariable(env, name);
  if (text == nullptr) {
    return InvalidArgumentError("{} is not set, but the launcher's other variables are", name);
  }
  int value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || end != text->data() + text->size() || value < 0) {
    return InvalidArgumentError("{}={} is not a non-negative integer", name, *text);
  }
  return value;
}

}  // namespace

const std::string* FindVariable(const Environment& env, std::string_view name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

Environment ProcessEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq != std::string_view::npos) env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

Result<std::optional<RankPlacement>> RankPlacementFromEnvironment(const Environment& env) {
  RankPlacement p;
  if (FindVariable(env, "OMPI_COMM_WORLD_RANK") != nullptr) {
    p.launcher = "mpirun";
    p.variables = "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK";
    SLUICE_ASSIGN_OR_RETURN(p.rank, IntVariable(env, "OMPI_COMM_WORLD_RANK"));
    SLUICE_ASSIGN_OR_RETURN(p.world_size, IntVariable(env, "OMPI_COMM_WORLD_SIZE"));
    SLUICE_ASSIGN_OR_RETURN(p.local_rank, IntVariable(env, "OMPI_COMM_WORLD_LOCAL_RANK"));
  } else if (FindVariable(env, "SLURM_PROCID") != nullptr &&
             (FindVariable(env, "SLURM_STEP_ID") != nullptr ||
              FindVariable(env, "SLURM_STEPID") != nullptr)) {
    // A task of a job step (srun). The batch script of an sbatch job has SLURM_PROCID=0 and the
    // allocation's SLURM_NTASKS too, but no step: it is one process, not rank 0 of many.
    p.launcher = "srun";
    const char* world_variable = FindVariable(env, "SLURM_STEP_NUM_TASKS") != nullptr
                                     ? "SLURM_STEP_NUM_TASKS"
                                     : "SLURM_NTASKS";
    p.variables = fmt::format("SLURM_PROCID, {}, SLURM_LOCALID", world_variable);
    SLUICE_ASSIGN_OR_RETURN(p.rank, IntVariable(env, "SLURM_PROCID"));
    SLUICE_ASSIGN_OR_RETURN(p.world_size, IntVariable(env, world_variable));
    SLUICE_ASSIGN_OR_RETURN(p.local_rank, IntVariable(env, "SLURM_LOCALID"));
  } else {
    return std::optional<RankPlacement>();
  }
  if (p.world_size < 1 || p.rank >= p.world_size) {
    return InvalidArgumentError("{} say rank {} of a world of {}: the rank must be below the size",
                                p.variables, p.rank, p.world_size);
  }
  return std::optional<RankPlacement>(p);
}

Status CheckWorldAgainstLauncher(const std::optional<RankPlacement>& placement, int mpi_rank,
                                 int mpi_size) {
  if (!placement.has_value()) return OkStatus();
  if (placement->world_size == mpi_size && placement->rank == mpi_rank) return OkStatus();
  if (placement->launcher == "srun" && mpi_size == 1) {
    return FailedPreconditionError(
        "srun started {} tasks ({}), but MPI sees this one as a world of 1: srun gave MPI no "
        "process-management interface, so every task would train alone. Run srun with an MPI "
        "plugin (srun --mpi=pmix ...; `srun --mpi=list` shows the ones this cluster has), or "
        "start the job with `sluice launch`, which does",
        placement->world_size, placement->variables);
  }
  return FailedPreconditionError(
      "{} started this process as rank {} of {} ({}), but MPI says rank {} of {}: the launcher "
      "and the MPI library disagree (two MPI installations?); start it with the mpirun of the "
      "Open MPI sluice was built with, or with `sluice launch`",
      placement->launcher, placement->rank, placement->world_size, placement->variables, mpi_rank,
      mpi_size);
}

Status CheckWorldAgainstLauncher(int mpi_rank, int mpi_size) {
  SLUICE_ASSIGN_OR_RETURN(std::optional<RankPlacement> placement,
                          RankPlacementFromEnvironment(ProcessEnvironment()));
  return CheckWorldAgainstLauncher(placement, mpi_rank, mpi_size);
}

}  // namespace sluice::cli
