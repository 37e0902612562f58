// The engine over a process grid's data-parallel group. With tensor-parallel peers that hold the
// whole model (every parameter replicated across them, as until layers are split by tensor),
// each data replica must train exactly as a plain data-parallel run over its data group: the
// peers see the same batches, ZeRO shards over the data group only, and the gradient norm counts
// each replicated parameter once although it is completed over the tensor ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/parallel/process_groups.h"
#include "engine/zero/word_gather.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

RunResult TrainOn(Result<ZeroRig> rig, const TrainSettings& settings) {
  SLUICE_CHECK(rig.ok()) << rig.status().ToString();
  Result<RunResult> run = RunZero(*rig, settings);
  SLUICE_CHECK(run.ok()) << run.status().ToString();
  return std::move(run).value();
}

TEST(ZeroGrid, TensorPeersTrainAsTheirDataParallelRun) {
  Comm& world = TestWorld();
  if (world.size() < 2) GTEST_SKIP() << "needs tensor-parallel peers: 2 or more ranks";
  for (int tensor = 2; tensor <= world.size(); tensor *= 2) {
    if (world.size() % tensor != 0) continue;
    Result<parallel::ProcessGrid> grid = parallel::ProcessGrid::Create(world.size(), tensor, 1);
    ASSERT_TRUE(grid.ok()) << grid.status().ToString();
    Result<std::unique_ptr<parallel::ProcessGroups>> groups =
        parallel::ProcessGroups::Create(world, *grid);
    ASSERT_TRUE(groups.ok()) << groups.status().ToString();
    const parallel::ProcessGroups& g = **groups;
    TrainSettings settings;
    settings.steps = 4;
    settings.world = g.data().size();
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << grid->shape().ToString() << ", stage " << stage);
      const RunResult on_grid = TrainOn(
          MakeZeroRig(SmallBucketOptions(stage, settings), TinyGpt(), g, settings.seed), settings);
      const RunResult plain = TrainOn(
          MakeZeroRig(SmallBucketOptions(stage, settings), TinyGpt(), g.data(), settings.seed),
          settings);
      EXPECT_TRUE(Bitwise(on_grid.losses, plain.losses));
      EXPECT_TRUE(Bitwise(on_grid.grad_norms, plain.grad_norms))
          << on_grid.grad_norms.back() << " vs " << plain.grad_norms.back();
      EXPECT_TRUE(Bitwise(on_grid.params, plain.params));
      // The tensor peers agree, bit for bit.
      uint64_t bits = 0;
      std::memcpy(&bits, &on_grid.grad_norms.back(), sizeof(bits));
      Result<std::vector<uint64_t>> peers = AllGatherWords(g.tensor(), std::span(&bits, 1));
      ASSERT_TRUE(peers.ok()) << peers.status().ToString();
      for (uint64_t peer : *peers) EXPECT_EQ(peer, bits);
    }
  }
}

}  // namespace
}  // namespace sluice::zero::testing
