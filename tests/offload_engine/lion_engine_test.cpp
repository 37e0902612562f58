// Lion (optimizer.type Lion) in the ZeRO engine on 1, 2 and 3 ranks (mpirun -np 1, 2, 3):
//   - stages 0-3 with the state on the device against the single-rank run (the reference of
//     zero_test_util.h with Lion): the loss falls; on one rank the same bits (Lion is elementwise
//     and sign(0) = 0 keeps the padding still, so a shard steps as the same elements of the whole
//     buffer do); on more ranks within a declared tolerance, since each rank's gradient sums its
//     own rows before the average and a direction within rounding of 0 may take the other sign;
//   - on two ranks without clipping, stages 0-3 bitwise equal to each other (as for Adam, the only
//     cross-rank arithmetic is (a + b) / 2);
//   - the state offloaded (cpu, nvme) at stages 1-3, f32 and bf16: bitwise equal to the device
//     run, with exp_avg alone kept: the state takes 2/3 of Adam's bytes (master, m vs master, m,
//     v), and no exp_avg_sq is ever handed out;
//   - an exported Lion state imported into an NVMe-offloaded engine continues bitwise; one with an
//     exp_avg_sq (Adam's) is refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "engine/config/config.h"
#include "offload_engine_test_util.h"
#include "offload_outcome.h"
#include "runtime/check.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

// Losses of an N-rank run against the single-rank run. Adam's equivalence test holds 1e-6 and Lion
// measures about 6e-8 here; the margin is for a direction within rounding of 0 taking the other
// sign on another MPI's summation order, which moves that element by 2 lr.
constexpr double kLossTolerance = 1e-5;

OptimizerConfig Lion() {
  OptimizerConfig o = Config().optimizer;
  o.type = OptimizerType::kLion;
  o.beta1 = 0.9;
  o.beta2 = 0.99;
  o.weight_decay = 0.1;
  return o;
}

ZeroOptions LionOptions(int stage, DType dtype, OffloadDevice tier, const std::string& nvme_dir) {
  ZeroOptions o = OffloadTestOptions(stage, dtype, tier, OffloadDevice::kNone, nvme_dir);
  o.optimizer = Lion();
  return o;
}

TrainSettings LionSettings(DType dtype, int64_t steps) {
  TrainSettings s = OffloadTrainSettings(dtype, steps);
  s.lr = 1e-3;
  return s;
}

class LionStageTest : public ::testing::TestWithParam<int> {};

TEST_P(LionStageTest, LossFallsAndMatchesTheSingleRankRun) {
  const int stage = GetParam();
  const TrainSettings settings = LionSettings(DType::kF32, /*steps=*/20);
  const RunResult reference = RunReference(TinyGpt(), settings, Lion());
  const OffloadOutcome run =
      TrainOffload(LionOptions(stage, DType::kF32, OffloadDevice::kNone, ""), settings);
  const std::string what = fmt::format("Lion stage {} on {} rank(s)", stage, TestWorld().size());
  ASSERT_EQ(run.run.losses.size(), 20u);
  EXPECT_LT(run.run.losses.back(), run.run.losses.front() - 0.1) << what;
  EXPECT_EQ(run.step, 20) << what;
  EXPECT_TRUE(
      std::all_of(run.exp_avg_sq.begin(), run.exp_avg_sq.end(), [](float v) { return v == 0.0f; }))
      << what << ": Lion handed out an exp_avg_sq";
  if (TestWorld().size() == 1) {
    EXPECT_TRUE(Bitwise(run.run.losses, reference.losses)) << what;
    EXPECT_TRUE(Bitwise(run.run.grad_norms, reference.grad_norms)) << what;
    EXPECT_TRUE(Bitwise(run.run.params, reference.params)) << what;
  } else {
    EXPECT_LE(MaxRelativeDifference(run.run.losses, reference.losses), kLossTolerance) << what;
  }
  if (TestWorld().rank() == 0) {
    std::printf("%s: loss %.4f -> %.4f, max difference to one rank %.3g relative\n", what.c_str(),
                run.run.losses.front(), run.run.losses.back(),
                MaxRelativeDifference(run.run.losses, reference.losses));
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, LionStageTest, ::testing::Values(0, 1, 2, 3), StageCaseName);

TEST(LionStages, AgreeBitwiseOnTwoRanksWithoutClipping) {
  if (TestWorld().size() != 2) GTEST_SKIP() << "the bitwise claim is about two ranks";
  TrainSettings settings = LionSettings(DType::kF32, /*steps=*/8);
  settings.max_grad_norm = 0.0;
  const OffloadOutcome stage0 =
      TrainOffload(LionOptions(0, DType::kF32, OffloadDevice::kNone, ""), settings);
  for (int stage = 1; stage <= 3; ++stage) {
    const OffloadOutcome run =
        TrainOffload(LionOptions(stage, DType::kF32, OffloadDevice::kNone, ""), settings);
    EXPECT_TRUE(Bitwise(run.run.losses, stage0.run.losses)) << "stage " << stage;
    EXPECT_TRUE(Bitwise(run.run.params, stage0.run.params)) << "stage " << stage;
  }
}

class LionOffloadTest : public ::testing::TestWithParam<OffloadCase> {};

TEST_P(LionOffloadTest, BitwiseEqualToTheDeviceRunWithOneMoment) {
  const auto [stage, dtype, tier] = GetParam();
  const TrainSettings settings = LionSettings(dtype, /*steps=*/4);
  ScratchDir nvme;
  const OffloadOutcome device =
      TrainOffload(LionOptions(stage, dtype, OffloadDevice::kNone, ""), settings);
  const OffloadOutcome offloaded =
      TrainOffload(LionOptions(stage, dtype, tier, nvme.path()), settings);
  const std::string what =
      fmt::format("Lion stage {} {} offload {} on {} rank(s)", stage, DTypeName(dtype),
                  OffloadDeviceName(tier), TestWorld().size());
  ExpectSameTraining(offloaded, device, what);
  EXPECT_EQ(offloaded.memory.optimizer_state, 0u) << what;

  // Adam's engines at the same settings, for the bytes: Lion keeps one moment instead of two.
  auto adam_memory = [&](OffloadDevice adam_tier) {
    Result<ZeroRig> adam =
        MakeZeroRig(OffloadTestOptions(stage, dtype, adam_tier, OffloadDevice::kNone, nvme.path()),
                    TinyGpt(), TestWorld(), settings.seed);
    SLUICE_CHECK(adam.ok()) << adam.status().ToString();
    return adam->engine->memory();
  };
  const ZeroMemory adam_offloaded = adam_memory(tier);
  if (tier == OffloadDevice::kCpu) {
    // Master and exp_avg against master, exp_avg and exp_avg_sq, each the page-rounded shard.
    EXPECT_GT(offloaded.memory.optimizer_host, 0u) << what;
    EXPECT_EQ(3 * offloaded.memory.optimizer_host, 2 * adam_offloaded.optimizer_host) << what;
  } else {
    EXPECT_EQ(offloaded.memory.optimizer_host, 0u) << what;
    EXPECT_GE(offloaded.memory.optimizer_nvme, 2 * offloaded.memory.host_grad_shard) << what;
    EXPECT_LT(offloaded.memory.optimizer_nvme, adam_offloaded.optimizer_nvme) << what;
    // The staging ring's slots hold p | m instead of p | m | v.
    EXPECT_LT(offloaded.memory.optimizer_pinned, adam_offloaded.optimizer_pinned) << what;
  }
  // On the device: the moment(s), plus the fp32 master in bf16 (in f32 the shard is the master).
  const uint64_t lion_tensors = dtype == DType::kF32 ? 1 : 2;
  EXPECT_EQ(device.memory.optimizer_state * (lion_tensors + 1),
            adam_memory(OffloadDevice::kNone).optimizer_state * lion_tensors)
      << what;
}

INSTANTIATE_TEST_SUITE_P(StagesDtypesTiers, LionOffloadTest, OffloadCases(), OffloadCaseName);

// What a checkpoint restore does (ImportState through RestoreState), from the device engine into
// an NVMe-offloaded one: the next steps are the same bits.
TEST(LionImport, IntoNvmeContinuesBitwiseAndAdamStateIsRefused) {
  const DType dtype = DType::kBF16;
  const int stage = 3;
  const TrainSettings settings = LionSettings(dtype, /*steps=*/2);
  Result<ZeroRig> device = MakeZeroRig(LionOptions(stage, dtype, OffloadDevice::kNone, ""),
                                       TinyGpt(), TestWorld(), settings.seed);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  ASSERT_TRUE(RunZero(*device, settings).ok());
  Result<ExportedState> saved = ExportEngineState(*device->engine);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();

  ScratchDir nvme;
  Result<ZeroRig> offloaded =
      MakeZeroRig(LionOptions(stage, dtype, OffloadDevice::kNvme, nvme.path()), TinyGpt(),
                  TestWorld(), settings.seed + 99);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().ToString();
  ZeroStateReaders with_sq = saved->Readers();
  Status refused = offloaded->engine->ImportState(with_sq);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("Lion"), std::string::npos) << refused.ToString();

  ZeroStateReaders readers = saved->Readers();
  readers.exp_avg_sq = nullptr;
  ASSERT_TRUE(offloaded->engine->ImportState(readers).ok());
  ExpectImportContinuesBitwise(*device, *offloaded, saved->step, settings);
}

}  // namespace
}  // namespace sluice::zero::testing
