#include "engine/parallel/process_groups.h"

#include <fmt/format.h>

namespace sluice::parallel {
namespace {

Result<std::unique_ptr<Comm>> SplitAlong(Comm& world, const ProcessGrid& grid, AxisSet axes,
                                         std::string_view name) {
  const int rank = world.rank();
  Result<std::unique_ptr<Comm>> comm =
      world.Split(grid.GroupIndexOf(rank, axes), grid.RankInGroup(rank, axes));
  if (!comm.ok()) {
    return Status(comm.status())
        .WithContext(fmt::format("creating the {} groups of the process grid ({})", name,
                                 grid.shape().ToString()));
  }
  return comm;
}

}  // namespace

Result<std::unique_ptr<ProcessGroups>> ProcessGroups::Create(Comm& world, const ProcessGrid& grid) {
  if (world.size() != grid.world_size()) {
    return InvalidArgumentError("a process grid of {} ranks ({}) over a world of {}",
                                grid.world_size(), grid.shape().ToString(), world.size());
  }
  std::unique_ptr<ProcessGroups> groups(new ProcessGroups(grid, world));
  groups->coords_ = grid.CoordsOf(world.rank());
  SLUICE_ASSIGN_OR_RETURN(groups->data_, SplitAlong(world, grid, kDataAxes, "data-parallel"));
  SLUICE_ASSIGN_OR_RETURN(groups->tensor_, SplitAlong(world, grid, kTensorAxes, "tensor-parallel"));
  SLUICE_ASSIGN_OR_RETURN(groups->pipeline_, SplitAlong(world, grid, kPipelineAxes, "pipeline"));
  SLUICE_ASSIGN_OR_RETURN(groups->model_parallel_,
                          SplitAlong(world, grid, kModelParallelAxes, "model-parallel"));
  return groups;
}

}  // namespace sluice::parallel
