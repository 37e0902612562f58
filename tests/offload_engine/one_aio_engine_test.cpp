// One I/O engine per rank (mpirun -np 2): training at stage 3 with the optimizer state and the
// parameters both on NVMe, saving checkpoints on the way, makes exactly one offload::AioEngine on
// each rank (offload::RankTiers, shared by the optimizer's swap store, the parameter store and the
// checkpoint shard files), and the trainer leaves none behind. With nothing on NVMe, a run makes
// no engine until its first checkpoint save, which makes the one engine the later saves reuse
// and which writes every byte of the rank's shard files.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/shard_format.h"
#include "engine/train/trainer.h"
#include "offload/aio_engine.h"
#include "offload/rank_tiers.h"
#include "runtime/check.h"
#include "tests/common/test_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;

using ::sluice::testing::TestWorld;

// A fresh directory for this test on every rank.
std::string FreshDir(const std::string& name) {
  const std::string dir = test_util::TempPath(name);
  if (TestWorld().rank() == 0) fs::remove_all(dir);
  SLUICE_CHECK(TestWorld().Barrier().ok());
  return dir;
}

// A trainer over the test world that prints nothing.
Result<std::unique_ptr<Trainer>> QuietTrainer(const Config& config) {
  TrainerOptions options;
  options.world = &TestWorld();
  options.progress = ProgressMode::kOff;
  options.summary_stream = nullptr;
  return Trainer::Create(config, options);
}

TEST(OneAioEnginePerRank, BothNvmeTiersAndCheckpointsShareOneEngine) {
  const std::string run_dir = FreshDir("run");
  // The ranks share the folder: each rank's swap files have its rank in their names.
  const std::string swap = FreshDir("swap");
  fs::create_directories(swap);
  const std::string corpus =
      test_util::WriteFile(test_util::TempPath("corpus_rank" + std::to_string(TestWorld().rank())),
                           test_util::SyntheticCorpus(64 * 1024));
  const Config config = test_util::LoadTestConfig(
      test_util::TinyGptYaml(corpus, run_dir),
      {"train_micro_batch_size_per_gpu=2", "zero_optimization.stage=3",
       "zero_optimization.reduce_bucket_size=5000",
       "zero_optimization.stage3_prefetch_bucket_size=6000",
       "zero_optimization.stage3_param_persistence_threshold=64",
       "zero_optimization.sub_group_size=4096", "zero_optimization.offload_optimizer.device=nvme",
       "zero_optimization.offload_optimizer.nvme_path=" + swap,
       "zero_optimization.offload_param.device=nvme",
       "zero_optimization.offload_param.nvme_path=" + swap,
       "zero_optimization.offload_param.max_in_cpu=0", "run.steps=4", "run.eval_interval=2",
       "checkpoint.save_interval=2"});

  const int64_t created_before = offload::AioEngine::created_count();
  const int64_t live_before = offload::AioEngine::live_count();
  {
    Result<std::unique_ptr<Trainer>> trainer = QuietTrainer(config);
    ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
    ASSERT_NE((*trainer)->zero().param_store(), nullptr) << "parameters not on NVMe";
    ASSERT_GT((*trainer)->optimizer().nvme_bytes(), 0u) << "optimizer state not on NVMe";
    Result<TrainSummary> summary = (*trainer)->Run();
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    // Both NVMe tiers did I/O, and checkpoints were written meanwhile.
    EXPECT_GT((*trainer)->zero().param_store()->stats().read_bytes, 0);
    EXPECT_TRUE(fs::exists(run_dir + "/checkpoints/step_2/manifest.json"));
    EXPECT_TRUE(fs::exists(run_dir + "/checkpoints/step_4/manifest.json"));

    EXPECT_EQ(offload::AioEngine::created_count() - created_before, 1)
        << "rank " << TestWorld().rank() << " made more than one I/O engine";
    EXPECT_EQ(offload::AioEngine::live_count() - live_before, 1);
  }
  EXPECT_EQ(offload::AioEngine::live_count(), live_before) << "the engine outlived the trainer";
}

TEST(OneAioEnginePerRank, NothingOnNvmeTheFirstCheckpointSaveMakesTheOneEngine) {
  const std::string run_dir = FreshDir("run_no_nvme");
  const std::string corpus =
      test_util::WriteFile(test_util::TempPath("corpus_rank" + std::to_string(TestWorld().rank())),
                           test_util::SyntheticCorpus(64 * 1024));
  const Config config = test_util::LoadTestConfig(
      test_util::TinyGptYaml(corpus, run_dir),
      {"train_micro_batch_size_per_gpu=2", "zero_optimization.stage=3",
       "zero_optimization.reduce_bucket_size=5000",
       "zero_optimization.stage3_prefetch_bucket_size=6000",
       "zero_optimization.stage3_param_persistence_threshold=64", "run.steps=4",
       "run.eval_interval=2", "checkpoint.save_interval=2"});

  const int64_t created_before = offload::AioEngine::created_count();
  const int64_t live_before = offload::AioEngine::live_count();
  {
    Result<std::unique_ptr<Trainer>> trainer = QuietTrainer(config);
    ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
    zero::ZeroEngine& engine = (*trainer)->zero();
    ASSERT_EQ(engine.param_store(), nullptr) << "parameters on NVMe";
    ASSERT_EQ((*trainer)->optimizer().nvme_bytes(), 0u) << "optimizer state on NVMe";
    EXPECT_EQ(engine.tiers().aio_if_created(), nullptr) << "an engine before any NVMe I/O";
    EXPECT_EQ(offload::AioEngine::created_count() - created_before, 0);

    Result<TrainSummary> summary = (*trainer)->Run();
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    EXPECT_EQ(offload::AioEngine::created_count() - created_before, 1)
        << "rank " << TestWorld().rank() << ": two saves should make exactly one I/O engine";
    EXPECT_EQ(offload::AioEngine::live_count() - live_before, 1);
    const offload::AioEngine* aio = engine.tiers().aio_if_created();
    ASSERT_NE(aio, nullptr) << "the saves did not go through the rank's I/O engine";
    // Both saves' shard files of this rank went through it, whole.
    uint64_t shard_bytes = 0;
    for (const char* step : {"step_2", "step_4"}) {
      for (checkpoint::ShardGroup group : checkpoint::kAllShardGroups) {
        const fs::path file = fs::path(run_dir) / "checkpoints" / step /
                              checkpoint::ShardFileName(group, TestWorld().rank());
        ASSERT_TRUE(fs::exists(file)) << file;
        shard_bytes += fs::file_size(file);
      }
    }
    EXPECT_GE(aio->stats().bytes_written, shard_bytes);
    EXPECT_EQ(engine.tiers().staging_budget().reserved(), 0u) << "staging held after the saves";
  }
  EXPECT_EQ(offload::AioEngine::live_count(), live_before) << "the engine outlived the trainer";
}

}  // namespace
}  // namespace sluice::train
