// The grid's communicators on real ranks: each group holds exactly the ranks the grid lists, in
// its order, for every grid a world of this size allows.
#include "engine/parallel/process_groups.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/common/test_world.h"

namespace sluice::parallel {
namespace {

using ::sluice::testing::TestWorld;

// Sum over the group of 2^(world rank): a bit mask of its members (exact in fp32 below 2^24).
float MembersMask(Comm& group, int world_rank) {
  float value = std::ldexp(1.0f, world_rank);
  Status status = group.AllReduce(&value, 1, DType::kF32, ReduceOp::kSum);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return value;
}

float ExpectedMask(const std::vector<int>& ranks) {
  float mask = 0.0f;
  for (int r : ranks) mask += std::ldexp(1.0f, r);
  return mask;
}

void ExpectGroup(Comm& group, const ProcessGrid& grid, AxisSet axes, int world_rank) {
  const std::vector<int> ranks = grid.Groups(axes)[grid.GroupIndexOf(world_rank, axes)];
  EXPECT_EQ(group.size(), static_cast<int>(ranks.size()));
  EXPECT_EQ(group.rank(), grid.RankInGroup(world_rank, axes));
  EXPECT_EQ(MembersMask(group, world_rank), ExpectedMask(ranks));
}

TEST(ProcessGroups, EachGroupHoldsTheGridsRanksInOrder) {
  Comm& world = TestWorld();
  const int n = world.size();
  for (int tensor = 1; tensor <= n; ++tensor) {
    for (int pipeline = 1; tensor * pipeline <= n; ++pipeline) {
      if (n % (tensor * pipeline) != 0) continue;
      SCOPED_TRACE(::testing::Message() << "tensor " << tensor << " pipeline " << pipeline);
      Result<ProcessGrid> grid = ProcessGrid::Create(n, tensor, pipeline);
      ASSERT_TRUE(grid.ok()) << grid.status().ToString();
      Result<std::unique_ptr<ProcessGroups>> groups = ProcessGroups::Create(world, *grid);
      ASSERT_TRUE(groups.ok()) << groups.status().ToString();
      const ProcessGroups& g = **groups;
      EXPECT_EQ(g.coords(), grid->CoordsOf(world.rank()));
      EXPECT_EQ(&g.world(), &world);
      ExpectGroup(g.data(), *grid, kDataAxes, world.rank());
      ExpectGroup(g.tensor(), *grid, kTensorAxes, world.rank());
      ExpectGroup(g.pipeline(), *grid, kPipelineAxes, world.rank());
      ExpectGroup(g.model_parallel(), *grid, kModelParallelAxes, world.rank());
    }
  }
}

TEST(ProcessGroups, RefusesAGridOfAnotherWorldSize) {
  Comm& world = TestWorld();
  Result<ProcessGrid> grid = ProcessGrid::Create(world.size() * 2, 1, 1);
  ASSERT_TRUE(grid.ok());
  Result<std::unique_ptr<ProcessGroups>> groups = ProcessGroups::Create(world, *grid);
  EXPECT_FALSE(groups.ok());
}

}  // namespace
}  // namespace sluice::parallel
