// Real ranks (mpirun -np 2 and 4) save one checkpoint together through CommAgreeFn, every rank
// handing only its own ZeRO partition; every rank then reads the whole checkpoint back. A bad
// tensor on one rank abandons the save on all of them.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/comm_agreement.h"
#include "runtime/comm/comm_factory.h"
#include "tests/checkpoint/checkpoint_test_util.h"
#include "tests/common/test_world.h"

namespace sluice::checkpoint {
namespace {

using ::sluice::testing::TestWorld;

// One directory for all ranks: rank 0 creates it and broadcasts its tag.
std::filesystem::path SharedDir() {
  auto tag = AgreeOnAttemptTag(TestWorld());
  SLUICE_CHECK(tag.ok()) << tag.status().ToString();
  const auto dir = std::filesystem::temp_directory_path() / ("sluice_ckpt_mpi_" + *tag);
  if (TestWorld().rank() == 0) std::filesystem::create_directories(dir);
  SLUICE_CHECK(TestWorld().Barrier().ok());
  return dir;
}

Status SaveStep(const std::filesystem::path& dir, int64_t step, bool break_rank_1) {
  const auto model = testing::SmallModel();
  std::vector<std::vector<float>> storage;
  auto tensors =
      testing::RankTensors(model, step, TestWorld().rank(), TestWorld().size(), &storage);
  if (break_rank_1 && TestWorld().rank() == 1) tensors[2].end = tensors[2].shape.numel() + 5;
  SaveRequest request;
  request.checkpoints_dir = dir;
  request.step = step;
  request.rank = TestWorld().rank();
  request.world = TestWorld().size();
  request.zero_stage = 3;
  SLUICE_ASSIGN_OR_RETURN(request.attempt_tag, AgreeOnAttemptTag(TestWorld()));
  request.keep_last = 2;
  return SaveCheckpoint(request, tensors, CommAgreeFn(TestWorld())).status();
}

TEST(CheckpointMpiTest, RanksSaveTogetherAndEveryRankReadsItAll) {
  const auto dir = SharedDir();
  for (int64_t step = 1; step <= 3; ++step) {
    Status s = SaveStep(dir, step, false);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto steps = ListCommittedSteps(dir);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{2, 3}));
  auto resolved = ResolveCheckpointDir(dir);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  auto ckpt = CheckpointReader::Open(*resolved);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->manifest().world_size, TestWorld().size());
  ASSERT_TRUE((*ckpt)->VerifyAll().ok());
  const auto model = testing::SmallModel();
  for (StateKind kind : kAllStateKinds) {
    for (size_t i = 0; i < model.size(); ++i) {
      const int64_t numel = model[i].shape.numel();
      std::vector<float> got(numel);
      ASSERT_TRUE((*ckpt)->ReadRange(kind, model[i].name, 0, numel, got.data()).ok());
      EXPECT_EQ(got, testing::FullValues(3, kind, i, numel)) << model[i].name;
    }
  }

  // Rank 1 hands a bad tensor: every rank fails, step 4 is never committed.
  Status broken = SaveStep(dir, 4, true);
  EXPECT_FALSE(broken.ok());
  if (TestWorld().rank() == 1) {
    EXPECT_EQ(broken.code(), StatusCode::kInvalidArgument) << broken.ToString();
  } else {
    EXPECT_EQ(broken.code(), StatusCode::kFailedPrecondition) << broken.ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "step_4"));
  EXPECT_EQ(**ReadLatestStep(dir), 3);

  ASSERT_TRUE(TestWorld().Barrier().ok());
  if (TestWorld().rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::checkpoint
