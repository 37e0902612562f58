// The split optimizer (split_optimizer.h) on its own, against the device optimizer over the same
// shard: steps bit for bit, state read, streamed and restored across the split, the bytes of each
// tier, and ratio "auto" choosing whole tiles within its budget from real measurements.
#include "engine/zero/split_optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/zero/partition_copy.h"
#include "engine/zero/zero_optimizer.h"
#include "offload/rank_tiers.h"
#include "runtime/check.h"
#include "runtime/device/device_factory.h"
#include "tests/common/test_ops.h"
#include "tests/offload_engine/offload_engine_test_util.h"

namespace sluice::zero::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kTile = offload::kOffloadTileQuantum;  // sub_group_size 2048
constexpr int64_t kCount = 5 * kTile + 700;              // six tiles, the last one partial

ZeroOptions SplitOptions(DType dtype, OffloadDevice tier, double ratio) {
  ZeroOptions o = DefaultZeroOptions();
  o.stage = 3;
  o.param_dtype = dtype;
  o.num_threads = 1;
  o.sub_group_size = kTile;
  o.optimizer.lr = 1e-3;
  o.optimizer.weight_decay = 0.01;
  o.offload_optimizer.device = tier;
  o.offload_optimizer.ratio = ratio;
  o.offload_optimizer.buffer_count = 3;
  return o;
}

// One optimizer, the device parameter shard it updates, and its own NVMe directory (the swap
// file is named by rank: two optimizers of one rank must not share a directory).
struct Rig {
  std::unique_ptr<ScratchDir> nvme = std::make_unique<ScratchDir>();
  DeviceBuffer params;
  std::unique_ptr<ops::OpsBackend> ops;
  std::unique_ptr<Stream> stream;  // the device optimizer's
  // The rank's tiers (its I/O engine), before the optimizer, which borrows them.
  std::unique_ptr<offload::RankTiers> tiers =
      std::make_unique<offload::RankTiers>(offload::RankTiersOptions{.rank = 0});
  std::unique_ptr<ZeroOptimizer> adam;
};

Rig MakeRig(Device& device, ZeroOptions options, uint32_t seed) {
  Rig rig;
  if (options.offload_optimizer.device == OffloadDevice::kNvme) {
    options.offload_optimizer.nvme_path = rig.nvme->path();
  }
  Result<DeviceBuffer> params =
      device.Allocate(kCount * DTypeSize(options.param_dtype), MemoryCategory::kParams);
  SLUICE_CHECK(params.ok()) << params.status().ToString();
  rig.params = std::move(params).value();
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(kCount);
  for (float& v : values) v = normal(random);
  // The cpu device's memory is host-addressable.
  offload::ConvertFromF32(values.data(), rig.params.data(), options.param_dtype, kCount, 1);
  rig.ops = sluice::testing::CpuOpsOn(device);
  rig.stream = std::move(device.CreateStream()).value();
  Result<std::unique_ptr<ZeroOptimizer>> adam = CreateZeroOptimizer(
      *rig.ops, *rig.stream, options, {.shard = rig.params.data()}, kCount, *rig.tiers);
  SLUICE_CHECK(adam.ok()) << adam.status().ToString();
  rig.adam = std::move(adam).value();
  Status loaded = rig.adam->LoadMasterFromParams();
  if (loaded.ok()) loaded = rig.stream->Synchronize();
  SLUICE_CHECK(loaded.ok()) << loaded.ToString();
  return rig;
}

struct State {
  std::vector<float> master, exp_avg, exp_avg_sq;
};

State ReadAll(const ZeroOptimizer& adam, int64_t begin, int64_t n) {
  State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  Status read = adam.ReadState(begin, n, s.master.data(), s.exp_avg.data(), s.exp_avg_sq.data());
  SLUICE_CHECK(read.ok()) << read.ToString();
  return s;
}

bool Same(const State& a, const State& b) {
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  return same(a.master, b.master) && same(a.exp_avg, b.exp_avg) && same(a.exp_avg_sq, b.exp_avg_sq);
}

bool SameParams(const Rig& a, const Rig& b, DType dtype) {
  return std::memcmp(a.params.data(), b.params.data(), kCount * DTypeSize(dtype)) == 0;
}

class Steps {
 public:
  explicit Steps(Device& device) : device_(&device) {
    Result<DeviceBuffer> grads = device.Allocate(kCount * sizeof(float), MemoryCategory::kGrads);
    SLUICE_CHECK(grads.ok());
    grads_ = std::move(grads).value();
  }
  // Fresh gradients for step `step`, then one step of each optimizer.
  void Run(int step, std::initializer_list<ZeroOptimizer*> optimizers) {
    std::mt19937 random(1000 + step);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    float* g = grads_.data_as<float>();
    for (int64_t i = 0; i < kCount; ++i) g[i] = normal(random);
    for (ZeroOptimizer* adam : optimizers) {
      Status stepped = adam->Step(g, 1e-3 * (step + 1), 0.5);
      SLUICE_CHECK(stepped.ok()) << stepped.ToString();
    }
    // Device optimizers step on their streams: done before the gradients are refilled and
    // anything is compared.
    const Status synced = device_->Synchronize();
    SLUICE_CHECK(synced.ok()) << synced.ToString();
  }

 private:
  Device* device_;
  DeviceBuffer grads_;
};

class SplitOptimizerTest : public ::testing::TestWithParam<std::tuple<DType, OffloadDevice>> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Device>> device =
        CreateDevice({.memory_limit_bytes = uint64_t{256} << 20});
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
  }
  std::unique_ptr<Device> device_;
};

TEST_P(SplitOptimizerTest, StepsAndStateMatchTheDeviceOptimizerAcrossTheSplit) {
  const auto [dtype, tier] = GetParam();
  Rig reference = MakeRig(*device_, SplitOptions(dtype, OffloadDevice::kNone, 1.0), 5);
  Rig split = MakeRig(*device_, SplitOptions(dtype, tier, 0.5), 5);
  const auto* s = dynamic_cast<const SplitOptimizer*>(split.adam.get());
  ASSERT_NE(s, nullptr);
  // Six tiles at ratio 0.5: the first three on the device.
  ASSERT_EQ(s->device_elements(), 3 * kTile);
  EXPECT_DOUBLE_EQ(split.adam->offload_ratio(),
                   static_cast<double>(kCount - 3 * kTile) / static_cast<double>(kCount));
  EXPECT_FALSE(split.adam->grads_in_host_memory());
  EXPECT_EQ(split.adam->state_bytes(),
            static_cast<uint64_t>(DeviceStateBytesPerElement(dtype) * 3 * kTile));
  EXPECT_GT(split.adam->pinned_bytes(), 0u);
  if (tier == OffloadDevice::kCpu) {
    EXPECT_GE(split.adam->host_bytes(), uint64_t{12} * (kCount - 3 * kTile));
  } else {
    EXPECT_GE(split.adam->nvme_bytes(), uint64_t{12} * (kCount - 3 * kTile));
  }

  Steps steps(*device_);
  for (int step = 0; step < 3; ++step) {
    steps.Run(step, {reference.adam.get(), split.adam.get()});
    ASSERT_TRUE(SameParams(split, reference, dtype)) << "step " << step + 1;
  }
  EXPECT_EQ(split.adam->step(), 3);
  EXPECT_GT(s->last_device_step_s(), 0.0);
  EXPECT_NE(split.adam->last_step_timings(), nullptr);

  // Reads over the whole shard and across the split.
  EXPECT_TRUE(Same(ReadAll(*split.adam, 0, kCount), ReadAll(*reference.adam, 0, kCount)));
  const int64_t across = 3 * kTile - 100;
  EXPECT_TRUE(Same(ReadAll(*split.adam, across, 300), ReadAll(*reference.adam, across, 300)));
  EXPECT_TRUE(Same(ReadAll(*split.adam, 3 * kTile, 5), ReadAll(*reference.adam, 3 * kTile, 5)));
  EXPECT_EQ(split.adam->ReadState(kCount - 1, 2, nullptr, nullptr, nullptr).code(),
            StatusCode::kOutOfRange);

  // Streaming across the split: increasing, contiguous pieces of at most a tile.
  const int64_t begin = kTile + 5;
  const int64_t n = kCount - begin - 3;
  State streamed{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  int64_t next = begin;
  Status status = split.adam->StreamState(
      begin, n, [&](int64_t at, int64_t count, const float* m, const float* a, const float* v) {
        EXPECT_EQ(at, next);
        EXPECT_LE(count, kTile);
        EXPECT_EQ(at / kTile, (at + count - 1) / kTile) << "a piece crosses a tile";
        std::memcpy(streamed.master.data() + (at - begin), m, count * sizeof(float));
        std::memcpy(streamed.exp_avg.data() + (at - begin), a, count * sizeof(float));
        std::memcpy(streamed.exp_avg_sq.data() + (at - begin), v, count * sizeof(float));
        next = at + count;
        return OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(next, begin + n);
  EXPECT_TRUE(Same(streamed, ReadAll(*reference.adam, begin, n)));

  // Restore the reference's state into a fresh split at another ratio (another boundary), then
  // step both on.
  Rig restored = MakeRig(*device_, SplitOptions(dtype, tier, 0.25), 99);
  ASSERT_EQ(dynamic_cast<const SplitOptimizer&>(*restored.adam).device_elements(), 4 * kTile);
  const State full = ReadAll(*reference.adam, 0, kCount);
  ASSERT_TRUE(restored.adam
                  ->RestoreState(offload::StateArraysSource(full.master.data(), full.exp_avg.data(),
                                                            full.exp_avg_sq.data()),
                                 reference.adam->step())
                  .ok());
  EXPECT_EQ(restored.adam->step(), 3);
  EXPECT_TRUE(SameParams(restored, reference, dtype));
  steps.Run(3, {reference.adam.get(), restored.adam.get()});
  EXPECT_TRUE(SameParams(restored, reference, dtype));
  EXPECT_TRUE(Same(ReadAll(*restored.adam, 0, kCount), ReadAll(*reference.adam, 0, kCount)));
}

TEST_P(SplitOptimizerTest, RatiosZeroAndOneLeaveOnePartEmpty) {
  const auto [dtype, tier] = GetParam();
  Rig reference = MakeRig(*device_, SplitOptions(dtype, OffloadDevice::kNone, 1.0), 3);
  Rig none_offloaded = MakeRig(*device_, SplitOptions(dtype, tier, 0.0), 3);
  EXPECT_DOUBLE_EQ(none_offloaded.adam->offload_ratio(), 0.0);
  EXPECT_EQ(none_offloaded.adam->pinned_bytes(), 0u);
  EXPECT_EQ(none_offloaded.adam->last_step_timings(), nullptr);
  Steps steps(*device_);
  for (int step = 0; step < 2; ++step) {
    steps.Run(step, {reference.adam.get(), none_offloaded.adam.get()});
  }
  EXPECT_TRUE(SameParams(none_offloaded, reference, dtype));

  // Ratio 1 is the plain offloaded optimizer (gradients in host memory), not a split.
  Rig all = MakeRig(*device_, SplitOptions(dtype, tier, 1.0), 3);
  EXPECT_EQ(dynamic_cast<const SplitOptimizer*>(all.adam.get()), nullptr);
  EXPECT_DOUBLE_EQ(all.adam->offload_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(reference.adam->offload_ratio(), 0.0);
}

// A restore that fails part-way (a corrupt checkpoint block in the offloaded half) leaves the
// device part restored and the offloaded part half restored: no step may run on that mix until a
// restore succeeds.
TEST_P(SplitOptimizerTest, ARestoreThatFailsPartWayBlocksStepsUntilARestoreSucceeds) {
  const auto [dtype, tier] = GetParam();
  Rig rig = MakeRig(*device_, SplitOptions(dtype, tier, 0.5), 5);
  Steps steps(*device_);
  steps.Run(0, {rig.adam.get()});
  const State state = ReadAll(*rig.adam, 0, kCount);
  const offload::OptimizerStateSource good = offload::StateArraysSource(
      state.master.data(), state.exp_avg.data(), state.exp_avg_sq.data());
  const int64_t corrupt_from = kCount - kTile;  // inside the offloaded part
  const offload::OptimizerStateSource failing = [&](int64_t begin, int64_t n, float* master,
                                                    float* exp_avg, float* exp_avg_sq) {
    if (begin + n > corrupt_from) return DataLossError("checkpoint block at element {}", begin);
    return good(begin, n, master, exp_avg, exp_avg_sq);
  };
  Status restored = rig.adam->RestoreState(failing, 1);
  ASSERT_EQ(restored.code(), StatusCode::kDataLoss) << restored.ToString();

  Result<DeviceBuffer> grads = device_->Allocate(kCount * sizeof(float), MemoryCategory::kGrads);
  ASSERT_TRUE(grads.ok());
  std::memset(grads->data(), 0, kCount * sizeof(float));
  Status stepped = rig.adam->Step(grads->data_as<float>(), 1e-3, 1.0);
  EXPECT_EQ(stepped.code(), StatusCode::kFailedPrecondition) << stepped.ToString();
  EXPECT_THAT(stepped.message(), HasSubstr("restore it from a checkpoint"));

  ASSERT_TRUE(rig.adam->RestoreState(good, 1).ok());
  EXPECT_TRUE(rig.adam->Step(grads->data_as<float>(), 1e-3, 1.0).ok());
}

TEST_P(SplitOptimizerTest, AutoMeasuresAndChoosesWholeTilesWithinTheBudget) {
  const auto [dtype, tier] = GetParam();
  Rig reference = MakeRig(*device_, SplitOptions(dtype, OffloadDevice::kNone, 1.0), 11);
  ZeroOptions options = SplitOptions(dtype, tier, 1.0);
  options.offload_optimizer.ratio_auto = true;

  // No budget given: half the free device memory, which holds the whole shard here.
  Rig unbounded = MakeRig(*device_, options, 11);
  const auto& u = dynamic_cast<const SplitOptimizer&>(*unbounded.adam);
  ASSERT_TRUE(u.auto_choice().has_value());
  const OffloadRatioChoice& choice = *u.auto_choice();
  ASSERT_TRUE(choice.measured.has_value());
  EXPECT_GT(choice.measured->device_elements_per_s, 0.0);
  EXPECT_GT(choice.measured->offloaded_elements_per_s, 0.0);
  EXPECT_EQ(choice.measured->probe_elements, 4 * kTile);
  EXPECT_EQ(choice.budget_elements, kCount);
  EXPECT_TRUE(u.device_elements() % kTile == 0 || u.device_elements() == kCount);
  EXPECT_DOUBLE_EQ(u.offload_ratio(), choice.ratio);
  EXPECT_EQ(u.device_elements(), choice.device_elements);

  // A budget of two tiles of state caps it; none leaves everything offloaded, unmeasured.
  options.offload_optimizer.auto_state_budget = DeviceStateBytesPerElement(dtype) * 2 * kTile + 768;
  Rig capped = MakeRig(*device_, options, 11);
  const auto& c = dynamic_cast<const SplitOptimizer&>(*capped.adam);
  EXPECT_LE(c.device_elements(), 2 * kTile);
  EXPECT_EQ(c.device_elements() % kTile, 0);
  options.offload_optimizer.auto_state_budget = 0;
  Rig none = MakeRig(*device_, options, 11);
  const auto& z = dynamic_cast<const SplitOptimizer&>(*none.adam);
  EXPECT_EQ(z.device_elements(), 0);
  EXPECT_DOUBLE_EQ(z.offload_ratio(), 1.0);
  EXPECT_FALSE(z.auto_choice()->measured.has_value());

  // Whatever was chosen, the steps are the device optimizer's.
  Steps steps(*device_);
  for (int step = 0; step < 2; ++step) {
    steps.Run(step,
              {reference.adam.get(), unbounded.adam.get(), capped.adam.get(), none.adam.get()});
  }
  EXPECT_TRUE(SameParams(unbounded, reference, dtype));
  EXPECT_TRUE(SameParams(capped, reference, dtype));
  EXPECT_TRUE(SameParams(none, reference, dtype));
}

INSTANTIATE_TEST_SUITE_P(DtypesTiers, SplitOptimizerTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Values(OffloadDevice::kCpu,
                                                              OffloadDevice::kNvme)),
                         [](const auto& info) {
                           return fmt::format("{}_{}", DTypeName(std::get<0>(info.param)),
                                              OffloadDeviceName(std::get<1>(info.param)));
                         });

TEST(SplitOptimizerOptions, RefusesAnNvmeParameterStore) {
  Result<std::unique_ptr<Device>> device = CreateDevice({.memory_limit_bytes = 16 << 20});
  ASSERT_TRUE(device.ok());
  ZeroOptions options = SplitOptions(DType::kBF16, OffloadDevice::kCpu, 0.5);
  // Never dereferenced.
  offload::NvmeParamStore* store = reinterpret_cast<offload::NvmeParamStore*>(&options);
  const std::unique_ptr<ops::OpsBackend> ops = sluice::testing::CpuOpsOn(**device);
  const std::unique_ptr<Stream> stream = std::move((*device)->CreateStream()).value();
  offload::RankTiers tiers({.rank = 0});
  Result<std::unique_ptr<ZeroOptimizer>> adam =
      CreateZeroOptimizer(*ops, *stream, options, {.nvme = store}, kCount, tiers);
  ASSERT_FALSE(adam.ok());
  EXPECT_NE(adam.status().message().find("offload_param.device = nvme"), std::string::npos)
      << adam.status().ToString();
}

}  // namespace
}  // namespace sluice::zero::testing
