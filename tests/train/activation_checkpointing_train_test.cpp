// Activation checkpointing turned on from the config: model.activation_checkpointing, with
// DeepSpeed's activation_checkpointing section saying how (docs/config.md). Training with it gives
// the same losses, gradients and validation loss, bit for bit, as training without it (fp32; the
// recomputation calls the same ops on the same inputs), for every block, the first
// number_checkpoints blocks and cpu_checkpointing, at stage 0 and stage 3; the config's notes
// for a section that is unused or partly a no-op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model/model_options.h"
#include "engine/train/run_setup.h"
#include "engine/train/trainer.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_util::SameBits;
using test_util::TinyGptConfig;

std::unique_ptr<Trainer> MakeTrainer(const Config& config) {
  Result<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(config, test_util::QuietTrainerOptions());
  EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
  return trainer.ok() ? std::move(trainer).value() : nullptr;
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<std::vector<float>> gradients;  // stage 0: each step's full gradient
  double val_loss = 0.0;
};

TrainedRun Train(const std::vector<std::string>& overrides, int steps) {
  Config config = TinyGptConfig(overrides);
  std::unique_ptr<Trainer> trainer = MakeTrainer(config);
  SLUICE_CHECK(trainer != nullptr);
  TrainedRun run;
  for (int s = 0; s < steps; ++s) {
    Result<StepMetrics> m = trainer->TrainStep();
    SLUICE_CHECK(m.ok()) << m.status().ToString();
    run.losses.push_back(m->loss);
    run.grad_norms.push_back(m->grad_norm);
    if (config.zero.stage == 0) {
      Result<std::vector<float>> grads = trainer->zero().ReadStepGradients();
      SLUICE_CHECK(grads.ok()) << grads.status().ToString();
      run.gradients.push_back(std::move(grads).value());
    }
  }
  Result<double> val = trainer->Evaluate();
  SLUICE_CHECK(val.ok()) << val.status().ToString();
  run.val_loss = *val;
  return run;
}

void ExpectSameBits(const TrainedRun& a, const TrainedRun& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_TRUE(SameBits(a.losses[s], b.losses[s]))
        << "step " << s + 1 << ": " << a.losses[s] << " vs " << b.losses[s];
    EXPECT_TRUE(SameBits(a.grad_norms[s], b.grad_norms[s])) << "step " << s + 1;
  }
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  for (size_t s = 0; s < a.gradients.size(); ++s) {
    ASSERT_EQ(a.gradients[s].size(), b.gradients[s].size());
    EXPECT_EQ(std::memcmp(a.gradients[s].data(), b.gradients[s].data(),
                          a.gradients[s].size() * sizeof(float)),
              0)
        << "gradients of step " << s + 1;
  }
  EXPECT_TRUE(SameBits(a.val_loss, b.val_loss)) << a.val_loss << " vs " << b.val_loss;
}

struct Case {
  std::string name;
  std::vector<std::string> overrides;  // on top of a 4-block tiny GPT-2
};

// Test names in failure messages instead of the bytes of the parameter.
void PrintTo(const Case& v, std::ostream* os) { *os << v.name; }

class CheckpointedTrainingTest : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointedTrainingTest, SameLossesAndGradientsBitForBit) {
  std::vector<std::string> base = {"model.n_layer=4"};
  const bool stage3 = GetParam().name.find("stage3") != std::string::npos;
  if (stage3) base.push_back("zero_optimization.stage=3");
  std::vector<std::string> checkpointed = base;
  checkpointed.push_back("model.activation_checkpointing=true");
  for (const std::string& o : GetParam().overrides) checkpointed.push_back(o);
  const TrainedRun plain = Train(base, 5);
  const TrainedRun ckpt = Train(checkpointed, 5);
  ExpectSameBits(plain, ckpt);
  // Training moved: the comparison is of a run that learns, not of a constant.
  EXPECT_LT(plain.losses.back(), plain.losses.front());
}

INSTANTIATE_TEST_SUITE_P(
    Settings, CheckpointedTrainingTest,
    ::testing::Values(
        Case{"all_blocks", {}},
        Case{"first_two_blocks", {"activation_checkpointing.number_checkpoints=2"}},
        Case{"cpu_checkpointing", {"activation_checkpointing.cpu_checkpointing=true"}},
        Case{"cpu_contiguous_profiled_synchronized",
             {"activation_checkpointing.cpu_checkpointing=true",
              "activation_checkpointing.contiguous_memory_optimization=true",
              "activation_checkpointing.number_checkpoints=3",
              "activation_checkpointing.profile=true",
              "activation_checkpointing.synchronize_checkpoint_boundary=true",
              "activation_checkpointing.partition_activations=true"}},
        Case{"device_contiguous", {"activation_checkpointing.contiguous_memory_optimization=true"}},
        Case{"stage3_cpu_checkpointing", {"activation_checkpointing.cpu_checkpointing=true"}}),
    [](const auto& info) { return info.param.name; });

int CountNotes(const Config& config, const std::string& text) {
  return static_cast<int>(
      std::count_if(config.notes.begin(), config.notes.end(),
                    [&](const std::string& note) { return note.find(text) != std::string::npos; }));
}

TEST(CheckpointingConfigTest, ModelKeyTurnsItOnAndTheSectionSaysHow) {
  const Config config =
      TinyGptConfig({"model.n_layer=4", "model.activation_checkpointing=true",
                     "activation_checkpointing.number_checkpoints=3",
                     "activation_checkpointing.cpu_checkpointing=true",
                     "activation_checkpointing.contiguous_memory_optimization=true",
                     "activation_checkpointing.synchronize_checkpoint_boundary=true",
                     "activation_checkpointing.profile=true"});
  Result<model::ModelOptions> options = ModelOptionsFromConfig(config, Precision::kF32);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_TRUE(options->activation_checkpointing);
  EXPECT_EQ(options->checkpointing.blocks, 3);
  EXPECT_TRUE(options->checkpointing.host);
  EXPECT_TRUE(options->checkpointing.contiguous);
  EXPECT_TRUE(options->checkpointing.synchronize);
  EXPECT_TRUE(options->checkpointing.profile);
  EXPECT_EQ(model::CheckpointedBlocks(*options), 3);
  EXPECT_EQ(DescribeModel(*options),
            "gpt2, n_layer 4, n_head 2, d_model 32, d_ff 128, positions 32, activation "
            "checkpointing of 3 of 4 blocks (inputs in host memory, contiguous)");
  EXPECT_EQ(CountNotes(config, "is unused"), 0);
  EXPECT_EQ(CountNotes(config, "no-op"), 0);
}

TEST(CheckpointingConfigTest, OffByDefaultEvenWithADeepSpeedSection) {
  const Config plain = TinyGptConfig();
  EXPECT_FALSE(plain.model.activation_checkpointing);
  EXPECT_EQ(CountNotes(plain, "activation_checkpointing"), 0);

  // A ds_config's section, as real ones carry it: accepted, one line says it is unused.
  const Config section = TinyGptConfig({"activation_checkpointing.partition_activations=true",
                                        "activation_checkpointing.cpu_checkpointing=true",
                                        "activation_checkpointing.number_checkpoints=4"});
  Result<model::ModelOptions> options = ModelOptionsFromConfig(section, Precision::kF32);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(model::CheckpointedBlocks(*options), 0);
  EXPECT_EQ(CountNotes(section, "activation_checkpointing"), 1);
  EXPECT_EQ(CountNotes(section, "is unused"), 1);
  EXPECT_EQ(CountNotes(section, "set model.activation_checkpointing: true"), 1);
  EXPECT_EQ(DescribeModel(*options).find("checkpointing"), std::string::npos);
}

TEST(CheckpointingConfigTest, PartitionActivationsIsANoOpAndTooManyCheckpointsMeanAll) {
  const Config config = TinyGptConfig({"model.activation_checkpointing=true",
                                       "activation_checkpointing.partition_activations=true",
                                       "activation_checkpointing.number_checkpoints=8"});
  EXPECT_EQ(CountNotes(config, "partition_activations: true is a no-op"), 1);
  EXPECT_EQ(CountNotes(config, "number_checkpoints = 8 is more than model.n_layer = 2"), 1);
  Result<model::ModelOptions> options = ModelOptionsFromConfig(config, Precision::kF32);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(model::CheckpointedBlocks(*options), 2);
}

}  // namespace
}  // namespace sluice::train
