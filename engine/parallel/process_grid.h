// The process grid: the world's ranks as a data × tensor × pipeline box, and the groups that run
// each kind of collective (parallelism-study.md §1).
//
// Ranks are laid out as Megatron's "tp-dp-pp" order and DeepSpeed's pipe/data/model topology: the
// tensor coordinate varies fastest, then data, then pipeline,
//   rank = tensor + T * (data + D * pipeline),
// so that the chattiest group (tensor) holds neighbouring ranks (one NVLink island) and the
// thinnest (pipeline) spans the farthest ones. With 16 ranks, T = 2, P = 4 (D = 2): tensor groups
// {0,1} {2,3} ..., data groups {0,2} {1,3} {4,6} ..., pipeline groups {0,4,8,12} {1,5,9,13} ....
//
// ProcessGrid is arithmetic only; ProcessGroups (process_groups.h) splits a communicator by it.
#pragma once

#include <string>
#include <vector>

#include "runtime/status.h"

namespace sluice::parallel {

// The grid's axes in layout order (innermost first).
enum class Axis : int { kTensor = 0, kData = 1, kPipeline = 2 };
inline constexpr int kAxes = 3;

// A set of axes: the ones a group spans (its members differ only in those coordinates).
struct AxisSet {
  bool tensor = false;
  bool data = false;
  bool pipeline = false;
  bool Has(Axis axis) const;
};

struct GridCoords {
  int tensor = 0;
  int data = 0;
  int pipeline = 0;
  int Of(Axis axis) const;
  bool operator==(const GridCoords&) const = default;
};

struct GridShape {
  int tensor = 1;
  int data = 1;
  int pipeline = 1;
  int world() const { return tensor * data * pipeline; }
  int Of(Axis axis) const;
  // "data 2 x tensor 2 x pipeline 1"
  std::string ToString() const;
};

class ProcessGrid {
 public:
  // A grid of `world_size` ranks with `tensor` × `pipeline` model-parallel ranks per data
  // replica: data = world_size / (tensor × pipeline). InvalidArgument when a size is below 1 or
  // the world does not divide, naming the config keys (tensor_parallel.autotp_size,
  // pipeline.stages).
  static Result<ProcessGrid> Create(int world_size, int tensor, int pipeline);

  const GridShape& shape() const { return shape_; }
  int world_size() const { return shape_.world(); }

  GridCoords CoordsOf(int rank) const;
  int RankOf(const GridCoords& coords) const;

  // Every group spanning `axes`, each listing its ranks in increasing order of their coordinates
  // along those axes (the rank-in-group order), the groups in order of the other coordinates.
  // Every rank is in exactly one group.
  std::vector<std::vector<int>> Groups(AxisSet axes) const;
  // Which of Groups(axes) holds `rank`, and its position there.
  int GroupIndexOf(int rank, AxisSet axes) const;
  int RankInGroup(int rank, AxisSet axes) const;

 private:
  explicit ProcessGrid(GridShape shape) : shape_(shape) {}
  GridShape shape_;
};

// The axes of the groups the engine uses.
inline constexpr AxisSet kDataAxes{.data = true};
inline constexpr AxisSet kTensorAxes{.tensor = true};
inline constexpr AxisSet kPipelineAxes{.pipeline = true};
// The model-parallel group: the ranks of one data replica (tensor × pipeline), over which the
// gradient norm and the overflow flag are completed.
inline constexpr AxisSet kModelParallelAxes{.tensor = true, .pipeline = true};

}  // namespace sluice::parallel
