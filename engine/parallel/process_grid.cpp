#include "engine/parallel/process_grid.h"

#include <fmt/format.h>

#include <array>

#include "runtime/check.h"

namespace sluice::parallel {
namespace {

constexpr std::array<Axis, kAxes> kLayoutOrder = {Axis::kTensor, Axis::kData, Axis::kPipeline};

// The one of three per-axis values that belongs to `axis`.
template <typename T>
T Along(Axis axis, T tensor, T data, T pipeline) {
  switch (axis) {
    case Axis::kTensor:
      return tensor;
    case Axis::kData:
      return data;
    case Axis::kPipeline:
      return pipeline;
  }
  return tensor;
}

// Coordinates from an index over `axes` (in layout order, the first varying fastest).
GridCoords Decompose(int index, const std::vector<Axis>& axes, const GridShape& shape) {
  std::array<int, kAxes> c{};
  for (Axis axis : axes) {
    const int size = shape.Of(axis);
    c[static_cast<int>(axis)] = index % size;
    index /= size;
  }
  return {.tensor = c[0], .data = c[1], .pipeline = c[2]};
}

// The inverse: the index over `axes` of `coords`.
int Compose(const GridCoords& coords, const std::vector<Axis>& axes, const GridShape& shape) {
  int index = 0;
  int stride = 1;
  for (Axis axis : axes) {
    index += coords.Of(axis) * stride;
    stride *= shape.Of(axis);
  }
  return index;
}

std::vector<Axis> AxesIn(AxisSet set, bool inside) {
  std::vector<Axis> out;
  for (Axis axis : kLayoutOrder) {
    if (set.Has(axis) == inside) out.push_back(axis);
  }
  return out;
}

int SizeOver(const std::vector<Axis>& axes, const GridShape& shape) {
  int size = 1;
  for (Axis axis : axes) size *= shape.Of(axis);
  return size;
}

}  // namespace

bool AxisSet::Has(Axis axis) const { return Along(axis, tensor, data, pipeline); }

int GridCoords::Of(Axis axis) const { return Along(axis, tensor, data, pipeline); }

int GridShape::Of(Axis axis) const { return Along(axis, tensor, data, pipeline); }

std::string GridShape::ToString() const {
  return fmt::format("data {} x tensor {} x pipeline {}", data, tensor, pipeline);
}

Result<ProcessGrid> ProcessGrid::Create(int world_size, int tensor, int pipeline) {
  if (world_size < 1) return InvalidArgumentError("a process grid of {} ranks", world_size);
  if (tensor < 1) {
    return InvalidArgumentError(
        "tensor_parallel.autotp_size = {}: the tensor-parallel size is at least 1 (0 means 1)",
        tensor);
  }
  if (pipeline < 1) {
    return InvalidArgumentError("pipeline.stages = {}: a model has at least 1 pipeline stage",
                                pipeline);
  }
  if (world_size % (tensor * pipeline) != 0) {
    return InvalidArgumentError(
        "the {} rank(s) of this run do not divide into data-parallel replicas of "
        "tensor_parallel.autotp_size {} x pipeline.stages {} = {} ranks: launch a multiple of {} "
        "ranks or change those sizes",
        world_size, tensor, pipeline, tensor * pipeline, tensor * pipeline);
  }
  return ProcessGrid(
      GridShape{.tensor = tensor, .data = world_size / (tensor * pipeline), .pipeline = pipeline});
}

GridCoords ProcessGrid::CoordsOf(int rank) const {
  SLUICE_CHECK(rank >= 0 && rank < world_size()) << "rank " << rank << " of " << world_size();
  return Decompose(rank, {kLayoutOrder.begin(), kLayoutOrder.end()}, shape_);
}

int ProcessGrid::RankOf(const GridCoords& coords) const {
  return Compose(coords, {kLayoutOrder.begin(), kLayoutOrder.end()}, shape_);
}

std::vector<std::vector<int>> ProcessGrid::Groups(AxisSet axes) const {
  const std::vector<Axis> inside = AxesIn(axes, true);
  const std::vector<Axis> outside = AxesIn(axes, false);
  const int group_size = SizeOver(inside, shape_);
  const int groups = SizeOver(outside, shape_);
  std::vector<std::vector<int>> out(groups);
  for (int g = 0; g < groups; ++g) {
    const GridCoords fixed = Decompose(g, outside, shape_);
    for (int i = 0; i < group_size; ++i) {
      const GridCoords varying = Decompose(i, inside, shape_);
      std::array<int, kAxes> c{};
      for (Axis axis : kLayoutOrder) {
        c[static_cast<int>(axis)] = axes.Has(axis) ? varying.Of(axis) : fixed.Of(axis);
      }
      out[g].push_back(RankOf({.tensor = c[0], .data = c[1], .pipeline = c[2]}));
    }
  }
  return out;
}

int ProcessGrid::GroupIndexOf(int rank, AxisSet axes) const {
  return Compose(CoordsOf(rank), AxesIn(axes, false), shape_);
}

int ProcessGrid::RankInGroup(int rank, AxisSet axes) const {
  return Compose(CoordsOf(rank), AxesIn(axes, true), shape_);
}

}  // namespace sluice::parallel
