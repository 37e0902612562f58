// The engine facade (engine.h) driven without the trainer: its step is the trainer's step bit
// for bit, and its errors name the step and the micro-batch.
#include "engine/train/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/data_loader.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/run_setup.h"
#include "engine/train/train_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_util::TinyGptConfig;

struct DrivenEngine {
  Config config;
  std::unique_ptr<Comm> world;
  std::unique_ptr<Engine> engine;
  std::optional<data::DataLoader> loader;
};

// The engine of `config` on a world of one, initialized from run.seed, with its data loader.
std::unique_ptr<DrivenEngine> Drive(Config config) {
  auto d = std::make_unique<DrivenEngine>();
  d->config = std::move(config);
  Result<parallel::ProcessGrid> grid = PlanEngine(&d->config, 1);
  EXPECT_TRUE(grid.ok()) << grid.status().ToString();
  Result<std::unique_ptr<Comm>> world = CreateTrainWorld(d->config);
  EXPECT_TRUE(world.ok()) << world.status().ToString();
  if (!grid.ok() || !world.ok()) return nullptr;
  d->world = std::move(world).value();
  Result<std::unique_ptr<Engine>> engine = Engine::Create(d->config, *d->world, *grid);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return nullptr;
  d->engine = std::move(engine).value();
  Status initialized =
      d->engine->zero().InitializeParameters(static_cast<uint64_t>(d->config.run.seed));
  EXPECT_TRUE(initialized.ok()) << initialized.ToString();
  Result<data::DataLoader> loader = data::DataLoader::Open(DataOptionsFromConfig(d->config), 0, 1);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!initialized.ok() || !loader.ok()) return nullptr;
  d->loader.emplace(std::move(loader).value());
  return d;
}

NextTrainBatch FromLoader(DrivenEngine& d) {
  return [&d](data::Batch* batch) {
    return d.loader->NextBatch(d.config.batch.micro_batch_per_gpu, batch);
  };
}

// Gradient accumulation 2, the learning rate warming up: the engine's steps, driven with the
// schedule's rates, are the trainer's steps (same loss, gradient norm and tokens, bit for bit).
TEST(EngineTest, StepsAsTheTrainerDoesBitForBit) {
  const Config config =
      TinyGptConfig({"train_micro_batch_size_per_gpu=2", "gradient_accumulation_steps=2"});
  Result<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(config, test_util::QuietTrainerOptions());
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  std::unique_ptr<DrivenEngine> driven = Drive(config);
  ASSERT_NE(driven, nullptr);
  Result<LrSchedule> schedule = LrSchedule::Create(config.scheduler, config.optimizer.lr);
  ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();

  for (int64_t step = 1; step <= 4; ++step) {
    Result<StepMetrics> expected = (*trainer)->TrainStep();
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();
    Result<EngineStep> got = driven->engine->TrainStep({.step = step, .lr = schedule->current_lr()},
                                                       FromLoader(*driven));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    schedule->Step();
    EXPECT_EQ(got->loss, expected->loss) << "step " << step;
    EXPECT_EQ(got->grad_norm, expected->grad_norm) << "step " << step;
    EXPECT_EQ(got->tokens, expected->tokens);
    EXPECT_EQ(got->tokens, 2 * 2 * config.model.seq_len);
    EXPECT_FALSE(got->overflow);
    EXPECT_GT(got->forward_s, 0.0);
    EXPECT_GT(got->backward_s, 0.0);
  }
}

TEST(EngineTest, AMicroBatchThatCannotBeReadNamesTheStepAndTheMicroBatch) {
  std::unique_ptr<DrivenEngine> driven =
      Drive(TinyGptConfig({"train_micro_batch_size_per_gpu=2", "gradient_accumulation_steps=3"}));
  ASSERT_NE(driven, nullptr);
  int calls = 0;
  NextTrainBatch from_loader = FromLoader(*driven);
  Result<EngineStep> step =
      driven->engine->TrainStep({.step = 7, .lr = 1e-3}, [&](data::Batch* batch) -> Status {
        if (++calls == 2) return DataLossError("token file truncated at byte 4096");
        return from_loader(batch);
      });
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(step.status().message().find("step 7, micro-batch 2"), std::string::npos)
      << step.status().ToString();
  EXPECT_NE(step.status().message().find("truncated at byte 4096"), std::string::npos);
}

TEST(EngineTest, EvaluatesTheMeanOverBatchesAndRefusesNone) {
  std::unique_ptr<DrivenEngine> driven = Drive(TinyGptConfig());
  ASSERT_NE(driven, nullptr);
  Result<data::ValidationIterator> validation = driven->loader->Validation(4, 2);
  ASSERT_TRUE(validation.ok()) << validation.status().ToString();
  Result<double> loss =
      driven->engine->Evaluate([&](data::Batch* batch) { return validation->Next(batch); });
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  // An untrained byte model: about ln(256).
  EXPECT_NEAR(*loss, std::log(256.0), 0.5);

  Result<double> none = driven->engine->Evaluate([](data::Batch*) { return Result<bool>(false); });
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
}

TEST(EngineTest, PlanRefusesAGridTheWorldCannotHold) {
  Config config = TinyGptConfig();
  config.parallel.pipeline = 3;
  Result<parallel::ProcessGrid> grid = PlanEngine(&config, 2);
  ASSERT_FALSE(grid.ok());
  EXPECT_NE(grid.status().message().find("pipeline.stages 3"), std::string::npos)
      << grid.status().ToString();
}

// Tensor-core matmul precisions are a GPU's: the cpu device refuses them naming the setting and
// the precision; fp32 is taken.
TEST(EngineTest, TheCpuDeviceRefusesAMatmulPrecisionBelowFp32) {
  for (const char* precision : {"tf32", "bf16"}) {
    Config config = TinyGptConfig({std::string("model.matmul_precision=") + precision});
    Result<parallel::ProcessGrid> grid = PlanEngine(&config, 1);
    ASSERT_TRUE(grid.ok()) << grid.status().ToString();
    Result<std::unique_ptr<Comm>> world = CreateTrainWorld(config);
    ASSERT_TRUE(world.ok()) << world.status().ToString();
    Result<std::unique_ptr<Engine>> engine = Engine::Create(config, **world, *grid);
    ASSERT_FALSE(engine.ok()) << precision;
    EXPECT_EQ(engine.status().code(), StatusCode::kUnimplemented);
    for (const std::string& named : std::vector<std::string>{
             "model.matmul_precision", std::string("precision ") + precision, "cpu ops backend"}) {
      EXPECT_NE(engine.status().message().find(named), std::string::npos)
          << named << " in " << engine.status().ToString();
    }
  }
  EXPECT_NE(Drive(TinyGptConfig({"model.matmul_precision=fp32"})), nullptr);
}

}  // namespace
}  // namespace sluice::train
