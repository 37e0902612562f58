// A checkpoint written by world A reads back, range by range, for any world B: the reader
// assembles each new rank's partition from the old ranks' files.
#include <gtest/gtest.h>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace sluice::checkpoint {
namespace {

using testing::FullValues;
using testing::SaveWorld;
using testing::SmallModel;
using testing::TempDir;

TEST(CheckpointReshardTest, EveryWorldReadsEveryOtherWorldsCheckpoint) {
  const auto model = SmallModel();
  for (int world_a = 1; world_a <= 4; ++world_a) {
    TempDir tmp;
    const uint64_t seed = 100 + world_a;
    ASSERT_TRUE(SaveWorld(tmp.path(), 7, world_a, model, seed).all_ok());
    auto dir = ResolveCheckpointDir(tmp.path());
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    auto ckpt = CheckpointReader::Open(*dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_EQ((*ckpt)->manifest().world_size, world_a);
    EXPECT_EQ((*ckpt)->manifest().step, 7);
    EXPECT_EQ((*ckpt)->manifest().states["rng"]["seed"], seed);
    ASSERT_TRUE((*ckpt)->VerifyAll().ok());
    for (int world_b = 1; world_b <= 4; ++world_b) {
      for (StateKind kind : kAllStateKinds) {
        for (size_t i = 0; i < model.size(); ++i) {
          const int64_t numel = model[i].shape.numel();
          const std::vector<float> full = FullValues(seed, kind, i, numel);
          for (int rank = 0; rank < world_b; ++rank) {
            ShardSpan span = ShardRange(static_cast<size_t>(numel), world_b, rank);
            std::vector<float> got(span.count, -1.0f);
            const int64_t begin = static_cast<int64_t>(span.offset);
            Status s = (*ckpt)->ReadRange(kind, model[i].name, begin,
                                          begin + static_cast<int64_t>(span.count), got.data());
            ASSERT_TRUE(s.ok()) << s.ToString();
            for (size_t e = 0; e < span.count; ++e) {
              ASSERT_EQ(got[e], full[span.offset + e])
                  << "A=" << world_a << " B=" << world_b << " rank " << rank << " " << model[i].name
                  << " element " << span.offset + e;
            }
          }
        }
      }
    }
  }
}

TEST(CheckpointReshardTest, ArbitraryRangesCrossRankAndBlockBoundaries) {
  const auto model = SmallModel();
  TempDir tmp;
  ASSERT_TRUE(SaveWorld(tmp.path(), 1, 3, model, 5).all_ok());
  auto ckpt = CheckpointReader::Open(tmp.path() / "step_1");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const int64_t numel = model[0].shape.numel();  // 296 elements, 64-byte checksum blocks
  const std::vector<float> full = FullValues(5, StateKind::kExpAvgSq, 0, numel);
  for (int64_t begin = 0; begin <= numel; begin += 13) {
    for (int64_t end = begin; end <= numel; end += 29) {
      std::vector<float> got(end - begin);
      ASSERT_TRUE(
          (*ckpt)->ReadRange(StateKind::kExpAvgSq, model[0].name, begin, end, got.data()).ok());
      for (int64_t e = begin; e < end; ++e) ASSERT_EQ(got[e - begin], full[e]) << e;
    }
  }
  std::vector<float> sink(2);
  Status past = (*ckpt)->ReadRange(StateKind::kMasterWeights, model[0].name, numel - 1, numel + 1,
                                   sink.data());
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_NE(past.message().find(model[0].name), std::string::npos) << past.message();
  Status missing =
      (*ckpt)->ReadRange(StateKind::kMasterWeights, "no.such.weight", 0, 1, sink.data());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("no.such.weight"), std::string::npos);
}

TEST(CheckpointReshardTest, ManifestRecordsLayoutTensorsConfigAndStates) {
  const auto model = SmallModel();
  TempDir tmp;
  ASSERT_TRUE(SaveWorld(tmp.path(), 12, 2, model, 9).all_ok());
  auto manifest = ReadManifest(tmp.path() / "step_12");
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->world_size, 2);
  EXPECT_EQ(manifest->zero_stage, 3);
  ASSERT_EQ(manifest->ranks.size(), 2u);
  EXPECT_EQ(manifest->ranks[1].files.at(ShardGroup::kOptimizer).path, "optimizer.rank00001.bin");
  ASSERT_EQ(manifest->tensors.size(), 3 * model.size());
  EXPECT_EQ(manifest->tensors[0].name, model[0].name);
  EXPECT_EQ(manifest->tensors[0].kind, StateKind::kMasterWeights);
  EXPECT_EQ(manifest->tensors[2].shape, model[2].shape);
  EXPECT_EQ(manifest->config["model"]["family"], "gpt2");
  EXPECT_EQ(manifest->states["step"], 12);
}

}  // namespace
}  // namespace sluice::checkpoint
