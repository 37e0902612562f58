#include "engine/parallel/process_grid.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace sluice::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

ProcessGrid MakeGrid(int world, int tensor, int pipeline) {
  Result<ProcessGrid> grid = ProcessGrid::Create(world, tensor, pipeline);
  EXPECT_TRUE(grid.ok()) << grid.status().ToString();
  return *grid;
}

// Megatron's example (parallel_state.py): 16 ranks, tensor 2, pipeline 4.
TEST(ProcessGrid, LaysOutMegatronsSixteenRankExample) {
  const ProcessGrid grid = MakeGrid(16, 2, 4);
  EXPECT_EQ(grid.shape().data, 2);
  EXPECT_EQ(grid.Groups(kTensorAxes),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(grid.Groups(kDataAxes),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(grid.Groups(kPipelineAxes),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(grid.Groups(kModelParallelAxes),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
}

TEST(ProcessGrid, CoordinatesRoundTripWithTensorFastest) {
  const ProcessGrid grid = MakeGrid(24, 2, 3);  // data 4
  EXPECT_EQ(grid.CoordsOf(0), (GridCoords{.tensor = 0, .data = 0, .pipeline = 0}));
  EXPECT_EQ(grid.CoordsOf(1), (GridCoords{.tensor = 1, .data = 0, .pipeline = 0}));
  EXPECT_EQ(grid.CoordsOf(2), (GridCoords{.tensor = 0, .data = 1, .pipeline = 0}));
  EXPECT_EQ(grid.CoordsOf(8), (GridCoords{.tensor = 0, .data = 0, .pipeline = 1}));
  EXPECT_EQ(grid.CoordsOf(23), (GridCoords{.tensor = 1, .data = 3, .pipeline = 2}));
  for (int rank = 0; rank < grid.world_size(); ++rank) {
    EXPECT_EQ(grid.RankOf(grid.CoordsOf(rank)), rank);
  }
}

// Every rank is in one group of each kind, at the position and index the split uses, and the
// members of a group differ only along its axes.
TEST(ProcessGrid, EveryRankIsInOneGroupOfEachKindAtItsPosition) {
  const ProcessGrid grid = MakeGrid(24, 2, 3);
  for (AxisSet axes : {kTensorAxes, kDataAxes, kPipelineAxes, kModelParallelAxes,
                       AxisSet{.tensor = true, .data = true, .pipeline = true}}) {
    const Groups groups = grid.Groups(axes);
    std::set<int> seen;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        const int rank = groups[g][i];
        EXPECT_TRUE(seen.insert(rank).second) << "rank " << rank << " twice";
        EXPECT_EQ(grid.GroupIndexOf(rank, axes), static_cast<int>(g));
        EXPECT_EQ(grid.RankInGroup(rank, axes), static_cast<int>(i));
        const GridCoords first = grid.CoordsOf(groups[g][0]);
        const GridCoords mine = grid.CoordsOf(rank);
        for (Axis axis : {Axis::kTensor, Axis::kData, Axis::kPipeline}) {
          if (!axes.Has(axis)) {
            EXPECT_EQ(mine.Of(axis), first.Of(axis));
          }
        }
      }
    }
    EXPECT_EQ(seen.size(), 24u);
  }
}

TEST(ProcessGrid, AOneByOneGridIsTheWorldAsData) {
  const ProcessGrid grid = MakeGrid(3, 1, 1);
  EXPECT_EQ(grid.Groups(kDataAxes), (Groups{{0, 1, 2}}));
  EXPECT_EQ(grid.Groups(kModelParallelAxes), (Groups{{0}, {1}, {2}}));
  EXPECT_EQ(grid.shape().ToString(), "data 3 x tensor 1 x pipeline 1");
}

TEST(ProcessGrid, RefusesSizesThatDoNotDivideTheWorld) {
  Result<ProcessGrid> grid = ProcessGrid::Create(6, 4, 1);
  ASSERT_FALSE(grid.ok());
  EXPECT_NE(grid.status().message().find("tensor_parallel.autotp_size 4 x pipeline.stages 1"),
            std::string::npos)
      << grid.status().ToString();
  EXPECT_FALSE(ProcessGrid::Create(4, 1, 3).ok());
  EXPECT_FALSE(ProcessGrid::Create(4, 0, 1).ok());
  EXPECT_FALSE(ProcessGrid::Create(4, 1, 0).ok());
  EXPECT_FALSE(ProcessGrid::Create(2, 4, 1).ok());
}

}  // namespace
}  // namespace sluice::parallel
