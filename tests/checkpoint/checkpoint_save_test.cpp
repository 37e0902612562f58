// The commit sequence: `latest`, keep-last-N pruning, re-saving a step, stale staging cleanup.
#include <gtest/gtest.h>

#include <fstream>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace sluice::checkpoint {
namespace {

using testing::FullValues;
using testing::SaveWorld;
using testing::SmallModel;
using testing::TempDir;

float FirstMaster(const std::filesystem::path& step_dir, const std::string& name) {
  auto ckpt = CheckpointReader::Open(step_dir);
  SLUICE_CHECK(ckpt.ok()) << ckpt.status().ToString();
  float v = 0;
  SLUICE_CHECK((*ckpt)->ReadRange(StateKind::kMasterWeights, name, 0, 1, &v).ok());
  return v;
}

TEST(CheckpointSaveTest, LatestFollowsSavesAndKeepLastPrunesOldest) {
  TempDir tmp;
  const auto model = SmallModel();
  for (int64_t step = 10; step <= 50; step += 10) {
    ASSERT_TRUE(SaveWorld(tmp.path(), step, 2, model, step, /*keep_last=*/2).all_ok());
    auto latest = ReadLatestStep(tmp.path());
    ASSERT_TRUE(latest.ok());
    EXPECT_EQ(**latest, step);
  }
  auto steps = ListCommittedSteps(tmp.path());
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{40, 50}));
  auto resolved = ResolveCheckpointDir(tmp.path());
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved->filename(), "step_50");
  // `latest` naming a directory that vanished is an error, not a path to nowhere.
  std::filesystem::rename(tmp.path() / "step_50", tmp.path() / "moved");
  auto dangling = ResolveCheckpointDir(tmp.path());
  EXPECT_EQ(dangling.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(dangling.status().message().find("step_50"), std::string::npos);
}

TEST(CheckpointSaveTest, ResolvesStepCheckpointsAndRunDirectories) {
  TempDir tmp;
  const auto checkpoints = tmp.path() / "checkpoints";
  ASSERT_TRUE(SaveWorld(checkpoints, 3, 1, SmallModel(), 1).all_ok());
  EXPECT_EQ(*ResolveCheckpointDir(tmp.path()), checkpoints / "step_3");
  EXPECT_EQ(*ResolveCheckpointDir(checkpoints), checkpoints / "step_3");
  EXPECT_EQ(*ResolveCheckpointDir(checkpoints / "step_3"), checkpoints / "step_3");
  auto missing = ResolveCheckpointDir(tmp.path() / "nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  { std::ofstream(checkpoints / "latest") << "garbage\n"; }
  auto bad = ResolveCheckpointDir(checkpoints);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("garbage"), std::string::npos);
}

TEST(CheckpointSaveTest, ResavingAStepReplacesItAtomically) {
  TempDir tmp;
  const auto model = SmallModel();
  ASSERT_TRUE(SaveWorld(tmp.path(), 8, 2, model, 1).all_ok());
  ASSERT_TRUE(SaveWorld(tmp.path(), 8, 3, model, 2).all_ok());
  const float expected = FullValues(2, StateKind::kMasterWeights, 0, 1)[0];
  EXPECT_EQ(FirstMaster(tmp.path() / "step_8", model[0].name), expected);
  auto manifest = ReadManifest(tmp.path() / "step_8");
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->world_size, 3);
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    EXPECT_FALSE(IsStagingName(entry.path().filename().string())) << entry.path();
  }
}

TEST(CheckpointSaveTest, StaleStagingIsRemovedByTheNextSave) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path() / "step_9.tmp-dead");
  { std::ofstream(tmp.path() / "step_9.tmp-dead" / "weights.rank00000.bin") << "partial"; }
  { std::ofstream(tmp.path() / "latest.tmp") << "step_9"; }
  ASSERT_TRUE(SaveWorld(tmp.path(), 10, 1, SmallModel(), 3).all_ok());
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "step_9.tmp-dead"));
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "latest.tmp"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "step_10" / "manifest.json"));
}

TEST(CheckpointSaveTest, MultiRankSaveNeedsATag) {
  TempDir tmp;
  SaveRequest request;
  request.checkpoints_dir = tmp.path();
  request.world = 2;
  auto result = SaveCheckpoint(request, {}, [](bool ok) -> Result<bool> { return ok; });
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("attempt_tag"), std::string::npos);
}

}  // namespace
}  // namespace sluice::checkpoint
