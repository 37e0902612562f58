// The ZeRO engine with its optimizer offloaded (offload_optimizer.device cpu | nvme) and, at
// stage 3, its parameters (offload_param cpu | nvme) against the same engine with everything on
// the device, on 1, 2 and 3 ranks (mpirun -np 1, 2, 3), stages 1-3, f32 and bf16 parameters.
//
// Why bitwise: the offloaded optimizer runs the same fused Adam kernel over the same fp32 shard
// elements (offloaded_adam.h), the gradient shard accumulates the same reduce-scattered buckets
// in the same order whether it lives on the device or in host memory, and the updated parameters
// are written in the parameter dtype exactly as ShardedAdam writes them. So losses, gradient
// norms, parameters and the exported optimizer state must match to the bit.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "offload_engine_test_util.h"
#include "offload_outcome.h"
#include "runtime/check.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

using Outcome = OffloadOutcome;

class OptimizerOffloadTest : public ::testing::TestWithParam<OffloadCase> {};

TEST_P(OptimizerOffloadTest, BitwiseEqualToDeviceOptimizer) {
  const auto [stage, dtype, tier] = GetParam();
  ScratchDir nvme;
  const ZeroOptions options =
      OffloadTestOptions(stage, dtype, tier, OffloadDevice::kNone, nvme.path());
  const Outcome offloaded = TrainOffload(options, dtype);
  const Outcome& device = DeviceBaseline(options, dtype);
  const std::string what =
      fmt::format("stage {} {} offload {} on {} rank(s)", stage, DTypeName(dtype),
                  OffloadDeviceName(tier), TestWorld().size());
  // The state export goes through the optimizer interface (ReadState on NVMe).
  ExpectSameTraining(offloaded, device, what);

  // Nothing of the optimizer and no gradient shard on the device any more.
  EXPECT_GT(device.memory.optimizer_state, 0u);
  EXPECT_GT(device.memory.grad_shard, 0u);
  EXPECT_EQ(offloaded.memory.optimizer_state, 0u) << what;
  EXPECT_EQ(offloaded.memory.grad_shard, 0u) << what;
  EXPECT_EQ(offloaded.memory.host_grad_shard, device.memory.grad_shard) << what;
  EXPECT_GT(offloaded.memory.optimizer_pinned, 0u) << what;
  if (tier == OffloadDevice::kCpu) {
    EXPECT_GE(offloaded.memory.optimizer_host, 3 * offloaded.memory.host_grad_shard) << what;
    EXPECT_EQ(offloaded.memory.optimizer_nvme, 0u) << what;
  } else {
    EXPECT_EQ(offloaded.memory.optimizer_host, 0u) << what;
    EXPECT_GE(offloaded.memory.optimizer_nvme, 3 * offloaded.memory.host_grad_shard) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(StagesDtypesTiers, OptimizerOffloadTest, OffloadCases(), OffloadCaseName);

// Stage 3 with the parameter shard in host memory (offload_param cpu) or on NVMe (nvme, where the
// optimizer writes each step's updated tiles back to the store and every gather reads its piece
// from it), with the optimizer on the device (cpu only) or offloaded: the same bits as everything
// on the device, and no parameter shard on the device.
class ParamOffloadTest
    : public ::testing::TestWithParam<std::tuple<DType, OffloadDevice, OffloadDevice>> {};

TEST_P(ParamOffloadTest, BitwiseEqualToDeviceParameters) {
  const auto [dtype, param_tier, optimizer_tier] = GetParam();
  ScratchDir nvme;
  const ZeroOptions options = OffloadTestOptions(3, dtype, optimizer_tier, param_tier, nvme.path());
  const Outcome offloaded = TrainOffload(options, dtype);
  const Outcome& device = DeviceBaseline(options, dtype);
  const std::string what = fmt::format(
      "stage 3 {} offload_param {}, offload_optimizer {} on {} rank(s)", DTypeName(dtype),
      OffloadDeviceName(param_tier), OffloadDeviceName(optimizer_tier), TestWorld().size());
  ExpectSameTraining(offloaded, device, what);
  EXPECT_GT(device.memory.param_shard, 0u);
  EXPECT_EQ(offloaded.memory.param_shard, 0u) << what;
  if (param_tier == OffloadDevice::kCpu) {
    EXPECT_EQ(offloaded.memory.host_param_shard, device.memory.param_shard) << what;
    EXPECT_EQ(offloaded.memory.param_nvme, 0u) << what;
  } else {
    // The shard lives on NVMe only: no host copy (max_in_cpu 0), a bounded pinned staging.
    EXPECT_EQ(offloaded.memory.host_param_shard, 0u) << what;
    EXPECT_EQ(offloaded.memory.param_cache, 0u) << what;
    EXPECT_GE(offloaded.memory.param_nvme, device.memory.param_shard) << what;
    EXPECT_GT(offloaded.memory.param_pinned, 0u) << what;
    // Every gather read NVMe; every step wrote every group back.
    EXPECT_GT(offloaded.param_store.nvme_reads, 0) << what;
    EXPECT_GT(offloaded.param_store.read_ns, 0) << what;
    EXPECT_EQ(offloaded.param_store.cache_hits, 0) << what;
    EXPECT_GT(offloaded.param_store.group_writes, 0) << what;
    EXPECT_LE(offloaded.param_store.peak_slots_in_use, 3) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    DtypesTiers, ParamOffloadTest,
    ::testing::Values(std::make_tuple(DType::kF32, OffloadDevice::kCpu, OffloadDevice::kNone),
                      std::make_tuple(DType::kBF16, OffloadDevice::kCpu, OffloadDevice::kNone),
                      std::make_tuple(DType::kF32, OffloadDevice::kCpu, OffloadDevice::kCpu),
                      std::make_tuple(DType::kBF16, OffloadDevice::kCpu, OffloadDevice::kNvme),
                      std::make_tuple(DType::kF32, OffloadDevice::kNvme, OffloadDevice::kCpu),
                      std::make_tuple(DType::kBF16, OffloadDevice::kNvme, OffloadDevice::kCpu),
                      std::make_tuple(DType::kF32, OffloadDevice::kNvme, OffloadDevice::kNvme),
                      std::make_tuple(DType::kBF16, OffloadDevice::kNvme, OffloadDevice::kNvme)),
    [](const auto& info) {
      return fmt::format("{}_param_{}_optimizer_{}", DTypeName(std::get<0>(info.param)),
                         OffloadDeviceName(std::get<1>(info.param)),
                         OffloadDeviceName(std::get<2>(info.param)));
    });

// A checkpoint restored into an NVMe-offloaded engine continues exactly as the device engine
// that wrote it: ImportState goes through RestoreState of the offloaded optimizer.
TEST(OptimizerOffloadCheckpoint, ImportIntoNvmeContinuesBitwise) {
  const DType dtype = DType::kBF16;
  const int stage = 3;
  const TrainSettings settings = OffloadTrainSettings(dtype, /*steps=*/2);
  const ZeroOptions device_options =
      OffloadTestOptions(stage, dtype, OffloadDevice::kNone, OffloadDevice::kNone, "");
  Result<ZeroRig> device = MakeZeroRig(device_options, TinyGpt(), TestWorld(), settings.seed);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  ASSERT_TRUE(RunZero(*device, settings).ok());
  Result<ExportedState> saved = ExportEngineState(*device->engine);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();

  ScratchDir nvme;
  Result<ZeroRig> offloaded = MakeZeroRig(
      OffloadTestOptions(stage, dtype, OffloadDevice::kNvme, OffloadDevice::kNone, nvme.path()),
      TinyGpt(), TestWorld(), /*seed=*/settings.seed + 99);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().ToString();
  ASSERT_TRUE(offloaded->engine->ImportState(saved->Readers()).ok());
  // Two more steps from the same state on both.
  ExpectImportContinuesBitwise(*device, *offloaded, saved->step, settings);
}

}  // namespace
}  // namespace sluice::zero::testing
