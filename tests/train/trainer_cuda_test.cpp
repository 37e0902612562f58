// Training on a GPU: the tiny GPT-2 and a Llama with grouped-query attention trained by the same
// trainer on device.type cuda and on the cpu device, 20 steps each, at ZeRO stages 0, 1 and 2
// (label gpu; skipped where no GPU is present). Issue 19's bar for the demo: the first step's loss
// within 1e-3 relative, the final validation loss within 1%; every step is held to that 1% too.
// And what is not there yet is refused with the setting to change.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/device/device_factory.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_util::QuietTrainerOptions;
using test_util::TinyGptConfig;
using test_util::TrainCurve;
using test_util::TrainedCurve;

#define SKIP_WITHOUT_GPU()                                                              \
  if (CudaDeviceCount() == 0) {                                                         \
    GTEST_SKIP() << "no CUDA GPU on this machine (the gpu label runs on an H100/H200)"; \
  }

TrainedCurve Train(const Config& config) {
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, QuietTrainerOptions());
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  return TrainCurve(**trainer, 20);
}

void ExpectSameTraining(const std::vector<std::string>& overrides) {
  std::vector<std::string> cuda = overrides;
  cuda.push_back("device.type=cuda");
  const TrainedCurve gpu = Train(TinyGptConfig(cuda));
  const TrainedCurve cpu = Train(TinyGptConfig(overrides));
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 1e-3 * cpu.losses[0]);
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-2 * cpu.losses[s]) << "step " << s + 1;
    EXPECT_EQ(gpu.tokens[s], cpu.tokens[s]);
  }
  EXPECT_NEAR(gpu.val_loss, cpu.val_loss, 1e-2 * cpu.val_loss);
  EXPECT_LT(gpu.losses.back(), gpu.losses.front()) << "it learns";
}

TEST(TrainerCudaTest, Gpt2TrainsAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  ExpectSameTraining({});
}

TEST(TrainerCudaTest, LlamaWithBf16MasterCopyTrainsAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  ExpectSameTraining({"model.family=llama", "model.n_head=4", "model.n_kv_head=2",
                      "model.d_model=64", "model.tie_embeddings=false", "model.dtype=bf16"});
}

// Stage 1 on the GPU: gradients all-reduced and parameters all-gathered by NCCL on the comm
// stream (one rank), the owned gradients extracted and the gathered parameters unpacked by
// CopySegments.
TEST(TrainerCudaTest, StageOneOverNcclTrainsAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  ExpectSameTraining({"zero_optimization.stage=1", "model.dtype=bf16"});
}

// Stage 2: each bucket packed by CopySegments, reduce-scattered by NCCL and accumulated into the
// gradient shard by AccumulateSegments on the comm stream.
TEST(TrainerCudaTest, StageTwoOverNcclTrainsAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  ExpectSameTraining({"zero_optimization.stage=2", "zero_optimization.reduce_bucket_size=3000"});
}

TEST(TrainerCudaTest, WhatRunsOnTheCpuOnlyIsRefusedNamingTheSetting) {
  SKIP_WITHOUT_GPU();
  for (const auto& [setting, named] :
       {std::pair{"zero_optimization.stage=3", "zero_optimization.stage"},
        std::pair{"model.dtype=f16", "fp16"}}) {
    Result<std::unique_ptr<Trainer>> trainer =
        Trainer::Create(TinyGptConfig({"device.type=cuda", setting}), QuietTrainerOptions());
    ASSERT_FALSE(trainer.ok()) << setting;
    EXPECT_EQ(trainer.status().code(), StatusCode::kUnimplemented) << trainer.status().ToString();
    EXPECT_NE(trainer.status().message().find(named), std::string::npos)
        << trainer.status().ToString();
  }
}

}  // namespace
}  // namespace sluice::train
