// The trainer with ZeRO-Offload / ZeRO-Infinity (mpirun -np 1, 2, 3): the same model, seed and
// global batches give bit-identical per-step losses, gradient norms and validation loss whether
// the optimizer state stays on the device, in host memory (cpu) or in the NVMe swap store (nvme),
// and whether the stage-3 parameter shard stays on the device, in host memory or on NVMe, in f32
// and bf16.
// Each offloaded run is compared with the run without offload on the same ranks and stage:
// Adam is elementwise and the offloaded optimizer only moves the bytes (docs/offload.md,
// "Exactness"), so nothing may differ, on one rank or several.
//
// Also checked: what was offloaded really left the device (the ledger's device optimizer and
// parameter categories) and landed on the tier the config names.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/check.h"
#include "runtime/comm/comm_factory.h"
#include "runtime/memory_accounting.h"
#include "tests/common/test_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_util::SameBits;

constexpr int kSteps = 4;

using ::sluice::testing::TestWorld;

struct Curve : test_util::TrainedCurve {
  zero::ZeroMemory memory;
  MemorySnapshot peaks;  // the ledger's, over the whole life of the trainer
};

struct Placement {
  std::string optimizer = "none";  // offload_optimizer.device
  std::string param = "none";      // offload_param.device
};

std::string Describe(int stage, const std::string& precision, const Placement& p) {
  return precision + ", stage " + std::to_string(stage) + ", optimizer " + p.optimizer +
         ", param " + p.param + ", " + std::to_string(TestWorld().size()) + " rank(s)";
}

// The tiny GPT with its corpus and swap directory of this rank's own.
Config RankConfig(int stage, const std::string& precision, const Placement& placement) {
  const std::string rank = std::to_string(TestWorld().rank());
  const std::string corpus = test_util::WriteFile(test_util::TempPath("corpus_rank" + rank),
                                                  test_util::SyntheticCorpus(64 * 1024));
  const std::string swap = test_util::TempPath("swap_rank" + rank);
  std::filesystem::create_directories(swap);
  std::vector<std::string> overrides = {
      "train_micro_batch_size_per_gpu=2", "zero_optimization.stage=" + std::to_string(stage),
      // Several buckets and gathers per pass, persistent norms and biases at stage 3.
      "zero_optimization.reduce_bucket_size=5000", "zero_optimization.allgather_bucket_size=8000",
      "zero_optimization.stage3_prefetch_bucket_size=6000",
      "zero_optimization.stage3_param_persistence_threshold=64",
      // Several optimizer tiles per rank (the tiny GPT has ~30k parameters), a short ring.
      "zero_optimization.sub_group_size=4096", "zero_optimization.offload_optimizer.buffer_count=3",
      "zero_optimization.offload_optimizer.device=" + placement.optimizer,
      "zero_optimization.offload_param.device=" + placement.param};
  if (placement.optimizer == "nvme") {
    overrides.push_back("zero_optimization.offload_optimizer.nvme_path=" + swap);
  }
  if (placement.param == "nvme") {
    // No host cache: every gather reads its unit from NVMe.
    overrides.insert(overrides.end(), {"zero_optimization.offload_param.nvme_path=" + swap,
                                       "zero_optimization.offload_param.max_in_cpu=0"});
  }
  if (precision == "bf16") overrides.push_back("bf16.enabled=true");
  return test_util::LoadTestConfig(test_util::TinyGptYaml(corpus, test_util::TempPath("run")),
                                   overrides);
}

Curve Train(const Config& config) {
  TrainerOptions options = test_util::QuietTrainerOptions(&TestWorld());
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  test_util::TrainedCurve trained = test_util::TrainCurve(**trainer, kSteps);
  return Curve{std::move(trained), (*trainer)->zero().memory(),
               MemoryLedger::Global().Snapshot()};
}

void ExpectSameBits(const Curve& run, const Curve& reference, const std::string& what) {
  ASSERT_EQ(run.losses.size(), reference.losses.size());
  for (size_t i = 0; i < run.losses.size(); ++i) {
    EXPECT_TRUE(SameBits(run.losses[i], reference.losses[i]))
        << what << ", step " << i + 1 << ": loss " << run.losses[i] << " vs "
        << reference.losses[i];
    EXPECT_TRUE(SameBits(run.grad_norms[i], reference.grad_norms[i]))
        << what << ", step " << i + 1 << ": grad norm " << run.grad_norms[i] << " vs "
        << reference.grad_norms[i];
  }
  EXPECT_TRUE(SameBits(run.val_loss, reference.val_loss)) << what;
  EXPECT_LT(run.losses.back(), run.losses.front()) << what << ": the tiny GPT should learn";
}

// The state is where the placement says, and not on the device.
void ExpectPlaced(const Curve& run, const Placement& p, const std::string& what) {
  const zero::ZeroMemory& m = run.memory;
  if (p.optimizer == "none") {
    EXPECT_GT(m.optimizer_state, 0u) << what;
    EXPECT_EQ(m.optimizer_host + m.optimizer_nvme, 0u) << what;
  } else {
    EXPECT_EQ(m.optimizer_state, 0u) << what << ": the optimizer state left the device";
    EXPECT_EQ(m.grad_shard, 0u) << what << ": the fp32 gradient shard left the device";
    EXPECT_GT(m.host_grad_shard, 0u) << what;
    EXPECT_GT(m.optimizer_pinned, 0u) << what << ": the staging ring";
    EXPECT_EQ(run.peaks.at(MemoryTier::kDevice, MemoryCategory::kOptimizer).peak, 0u) << what;
    if (p.optimizer == "cpu") {
      EXPECT_GT(m.optimizer_host, 0u) << what;
      EXPECT_EQ(m.optimizer_nvme, 0u) << what;
    } else {
      EXPECT_GT(m.optimizer_nvme, 0u) << what;
      EXPECT_EQ(m.optimizer_host, 0u) << what;
    }
  }
  if (p.param == "cpu") {
    EXPECT_GT(m.host_param_shard, 0u) << what;
  } else {
    EXPECT_EQ(m.host_param_shard, 0u) << what;
  }
  if (p.param == "nvme") {
    EXPECT_GT(m.param_nvme, 0u) << what;
    EXPECT_EQ(m.param_cache, 0u) << what;
  } else {
    EXPECT_EQ(m.param_nvme, 0u) << what;
  }
  if (p.param != "none") {
    EXPECT_EQ(m.param_shard, 0u) << what << ": the parameter shard left the device";
  }
}

struct Case {
  int stage;
  std::string precision;
};

class TrainerOffloadTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainerOffloadTest, LossesAreBitIdenticalOnEveryTier) {
  const auto& [stage, precision] = GetParam();
  std::vector<Placement> placements = {{"cpu", "none"}, {"nvme", "none"}};
  if (stage == 3) {
    placements.insert(
        placements.end(),
        {{"none", "cpu"}, {"cpu", "cpu"}, {"nvme", "cpu"}, {"cpu", "nvme"}, {"nvme", "nvme"}});
  }
  const Placement on_device;
  const Curve reference = Train(RankConfig(stage, precision, on_device));
  ExpectPlaced(reference, on_device, Describe(stage, precision, on_device));
  for (const Placement& placement : placements) {
    const std::string what = Describe(stage, precision, placement);
    const Curve run = Train(RankConfig(stage, precision, placement));
    ExpectSameBits(run, reference, what);
    ExpectPlaced(run, placement, what);
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.precision + "_stage" + std::to_string(info.param.stage);
}

INSTANTIATE_TEST_SUITE_P(Tiers, TrainerOffloadTest,
                         ::testing::Values(Case{3, "f32"}, Case{3, "bf16"}, Case{1, "bf16"},
                                           Case{2, "f32"}),
                         CaseName);

}  // namespace
}  // namespace sluice::train
