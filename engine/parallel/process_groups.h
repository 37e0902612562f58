// The communicators of a process grid (process_grid.h): one per group this rank belongs to,
// split from the world in one global order (data, tensor, pipeline, model-parallel) on every
// rank, each listing its ranks in grid order.
//
//   SLUICE_ASSIGN_OR_RETURN(ProcessGrid grid, ProcessGrid::Create(world.size(), tp, pp));
//   SLUICE_ASSIGN_OR_RETURN(auto groups, ProcessGroups::Create(world, grid));
//   ZeroEngine::Create(options, model, *groups, device);   // shards over groups->data()
#pragma once

#include <memory>

#include "engine/parallel/process_grid.h"
#include "runtime/comm.h"
#include "runtime/status.h"

namespace sluice::parallel {

class ProcessGroups {
 public:
  // Collective over `world`, which must have grid.world_size() ranks and outlive the groups.
  static Result<std::unique_ptr<ProcessGroups>> Create(Comm& world, const ProcessGrid& grid);

  const ProcessGrid& grid() const { return grid_; }
  // This rank's place in the grid.
  const GridCoords& coords() const { return coords_; }

  Comm& world() const { return *world_; }
  // ZeRO's sharding and gradient reduction; the data loader's rank and size.
  Comm& data() const { return *data_; }
  Comm& tensor() const { return *tensor_; }
  Comm& pipeline() const { return *pipeline_; }
  // The tensor × pipeline ranks of this rank's data replica: the gradient norm and the overflow
  // flag are completed over it (parallelism-study.md §1.4).
  Comm& model_parallel() const { return *model_parallel_; }

 private:
  ProcessGroups(const ProcessGrid& grid, Comm& world) : grid_(grid), world_(&world) {}

  ProcessGrid grid_;
  GridCoords coords_;
  Comm* world_;
  std::unique_ptr<Comm> data_;
  std::unique_ptr<Comm> tensor_;
  std::unique_ptr<Comm> pipeline_;
  std::unique_ptr<Comm> model_parallel_;
};

}  // namespace sluice::parallel
