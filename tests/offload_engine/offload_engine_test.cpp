// The ZeRO engine with its optimizer offloaded (offload_optimizer.device cpu | nvme) against the
// same engine with everything on the device, on 1 and 2 ranks (mpirun -np 1, 2), stages 1-3,
// f32 and bf16 parameters.
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
#include "runtime/check.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

template <typename T>
bool Bitwise(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TrainSettings Settings(DType dtype) {
  TrainSettings s;
  s.steps = 4;
  s.world = TestWorld().size();
  s.param_dtype = dtype;
  s.max_grad_norm = 1.0;
  return s;
}

struct Outcome {
  RunResult run;
  ZeroMemory memory;
  std::vector<float> master, exp_avg, exp_avg_sq;
  int64_t step = 0;
};

Outcome Train(const ZeroOptions& options, DType dtype) {
  const TrainSettings settings = Settings(dtype);
  Result<ZeroRig> rig = MakeZeroRig(options, TinyGpt(), TestWorld(), settings.seed);
  SLUICE_CHECK(rig.ok()) << rig.status().ToString();
  Result<RunResult> run = RunZero(*rig, settings);
  SLUICE_CHECK(run.ok()) << run.status().ToString();
  Outcome out;
  out.run = std::move(run).value();
  out.memory = rig->engine->memory();
  Status exported = rig->engine->ExportState(&out.master, &out.exp_avg, &out.exp_avg_sq, &out.step);
  SLUICE_CHECK(exported.ok()) << exported.ToString();
  return out;
}

const Outcome& DeviceBaseline(int stage, DType dtype) {
  static std::map<std::pair<int, DType>, Outcome> cache;
  auto it = cache.find({stage, dtype});
  if (it == cache.end()) {
    it = cache
             .emplace(std::make_pair(stage, dtype),
                      Train(OffloadTestOptions(stage, dtype, OffloadDevice::kNone,
                                               OffloadDevice::kNone, ""),
                            dtype))
             .first;
  }
  return it->second;
}

class OptimizerOffloadTest
    : public ::testing::TestWithParam<std::tuple<int, DType, OffloadDevice>> {};

TEST_P(OptimizerOffloadTest, BitwiseEqualToDeviceOptimizer) {
  const auto [stage, dtype, tier] = GetParam();
  ScratchDir nvme;
  const Outcome offloaded =
      Train(OffloadTestOptions(stage, dtype, tier, OffloadDevice::kNone, nvme.path()), dtype);
  const Outcome& device = DeviceBaseline(stage, dtype);
  const std::string what =
      fmt::format("stage {} {} offload {} on {} rank(s)", stage, DTypeName(dtype),
                  OffloadDeviceName(tier), TestWorld().size());
  EXPECT_TRUE(Bitwise(offloaded.run.losses, device.run.losses)) << what;
  EXPECT_TRUE(Bitwise(offloaded.run.grad_norms, device.run.grad_norms)) << what;
  EXPECT_TRUE(Bitwise(offloaded.run.params, device.run.params)) << what;
  // The checkpoint export goes through the optimizer interface (ReadState on NVMe).
  EXPECT_EQ(offloaded.step, device.step) << what;
  EXPECT_TRUE(Bitwise(offloaded.master, device.master)) << what;
  EXPECT_TRUE(Bitwise(offloaded.exp_avg, device.exp_avg)) << what;
  EXPECT_TRUE(Bitwise(offloaded.exp_avg_sq, device.exp_avg_sq)) << what;

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

INSTANTIATE_TEST_SUITE_P(
    StagesDtypesTiers, OptimizerOffloadTest,
    ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(OffloadDevice::kCpu, OffloadDevice::kNvme)),
    [](const auto& info) {
      return fmt::format("Stage{}_{}_{}", std::get<0>(info.param),
                         DTypeName(std::get<1>(info.param)),
                         OffloadDeviceName(std::get<2>(info.param)));
    });

// Stage 3 with the parameter shard in host memory (offload_param cpu), alone or with the
// optimizer offloaded too: the same bits as everything on the device, and no parameter shard on
// the device.
class ParamOffloadTest : public ::testing::TestWithParam<std::tuple<DType, OffloadDevice>> {};

TEST_P(ParamOffloadTest, BitwiseEqualToDeviceParameters) {
  const auto [dtype, optimizer_tier] = GetParam();
  ScratchDir nvme;
  const Outcome offloaded =
      Train(OffloadTestOptions(3, dtype, optimizer_tier, OffloadDevice::kCpu, nvme.path()), dtype);
  const Outcome& device = DeviceBaseline(3, dtype);
  const std::string what =
      fmt::format("stage 3 {} offload_param cpu, offload_optimizer {} on {} rank(s)",
                  DTypeName(dtype), OffloadDeviceName(optimizer_tier), TestWorld().size());
  EXPECT_TRUE(Bitwise(offloaded.run.losses, device.run.losses)) << what;
  EXPECT_TRUE(Bitwise(offloaded.run.params, device.run.params)) << what;
  EXPECT_TRUE(Bitwise(offloaded.master, device.master)) << what;
  EXPECT_GT(device.memory.param_shard, 0u);
  EXPECT_EQ(offloaded.memory.param_shard, 0u) << what;
  EXPECT_EQ(offloaded.memory.host_param_shard, device.memory.param_shard) << what;
}

INSTANTIATE_TEST_SUITE_P(DtypesOptimizerTiers, ParamOffloadTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Values(OffloadDevice::kNone,
                                                              OffloadDevice::kCpu,
                                                              OffloadDevice::kNvme)),
                         [](const auto& info) {
                           return fmt::format("{}_optimizer_{}", DTypeName(std::get<0>(info.param)),
                                              OffloadDeviceName(std::get<1>(info.param)));
                         });

TEST(ParamOffloadOptions, BelowStageThreeIsRefused) {
  ZeroOptions o = OffloadTestOptions(2, DType::kF32, OffloadDevice::kCpu, OffloadDevice::kCpu, "");
  Status status = ValidateZeroOptions(o);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("offload_param"), std::string::npos) << status.ToString();
}

// A checkpoint restored into an NVMe-offloaded engine continues exactly as the device engine
// that wrote it: ImportState goes through RestoreState of the offloaded optimizer.
TEST(OptimizerOffloadCheckpoint, ImportIntoNvmeContinuesBitwise) {
  const DType dtype = DType::kBF16;
  const int stage = 3;
  TrainSettings settings = Settings(dtype);
  settings.steps = 2;
  const ZeroOptions device_options =
      OffloadTestOptions(stage, dtype, OffloadDevice::kNone, OffloadDevice::kNone, "");
  Result<ZeroRig> device = MakeZeroRig(device_options, TinyGpt(), TestWorld(), settings.seed);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  ASSERT_TRUE(RunZero(*device, settings).ok());
  std::vector<float> master, exp_avg, exp_avg_sq;
  int64_t step = 0;
  ASSERT_TRUE(device->engine->ExportState(&master, &exp_avg, &exp_avg_sq, &step).ok());

  ScratchDir nvme;
  Result<ZeroRig> offloaded = MakeZeroRig(
      OffloadTestOptions(stage, dtype, OffloadDevice::kNvme, OffloadDevice::kNone, nvme.path()),
      TinyGpt(), TestWorld(), /*seed=*/settings.seed + 99);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().ToString();
  // The exported vectors are in this rank's shard order: the readers index them by the layout.
  const ShardLayout& layout = offloaded->engine->layout();
  std::vector<ZeroStateRange> ranges = offloaded->engine->SavedStateRanges();
  auto reader_of = [&layout, &ranges](const std::vector<float>& shard) {
    return [&layout, &ranges, &shard](int param, int64_t begin, int64_t end, float* dst) -> Status {
      for (const ZeroStateRange& r : ranges) {
        if (r.param == param && r.begin <= begin && end <= r.end) {
          std::memcpy(dst, shard.data() + r.shard_offset + (begin - r.begin),
                      static_cast<size_t>(end - begin) * sizeof(float));
          return OkStatus();
        }
      }
      return NotFoundError("no saved range of parameter {} covers [{}, {})", param, begin, end);
    };
  };
  (void)layout;
  ZeroStateReaders readers{.master = reader_of(master),
                           .exp_avg = reader_of(exp_avg),
                           .exp_avg_sq = reader_of(exp_avg_sq),
                           .optimizer_step = step};
  ASSERT_TRUE(offloaded->engine->ImportState(readers).ok());
  ASSERT_TRUE(offloaded->engine->PublishParameters().ok());
  EXPECT_EQ(offloaded->engine->optimizer().step(), step);

  // Two more steps from the same state on both.
  Result<RunResult> a = RunZero(*device, settings);
  Result<RunResult> b = RunZero(*offloaded, settings);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(Bitwise(a->losses, b->losses));
  EXPECT_TRUE(Bitwise(a->params, b->params));
}

TEST(OptimizerOffloadOptions, StageZeroIsRefusedNamingTheKeys) {
  ZeroOptions o = OffloadTestOptions(0, DType::kF32, OffloadDevice::kCpu, OffloadDevice::kNone, "");
  Status status = ValidateZeroOptions(o);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("zero_optimization.stage"), std::string::npos)
      << status.ToString();
}

}  // namespace
}  // namespace sluice::zero::testing
