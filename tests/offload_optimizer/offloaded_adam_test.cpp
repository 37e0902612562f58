// OffloadedAdam against ShardedAdam: bit-identical parameters, master weights and moments over
// several steps, with the state in host memory and on NVMe, for every parameter and gradient
// dtype, odd sizes and every pipeline setting; and the memory it charges to each tier.
#include "offload/offloaded_adam.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <tuple>

#include "runtime/memory_accounting.h"
#include "tests/offload_optimizer/offload_optimizer_test_util.h"

namespace sluice::zero {
namespace {

using testing::FirstDifference;
using ::testing::HasSubstr;
using testing::MakeCpuDevice;
using testing::MakeRunInputs;
using testing::NvmeFixture;
using testing::RunInputs;
using testing::RunOffloadedAdam;
using testing::RunShardedAdam;
using testing::StateAfter;

constexpr int64_t kTile =
    offload::kOffloadTileQuantum;  // small tiles: many of them in a small shard

offload::OffloadedAdamOptions HostOptions() {
  offload::OffloadedAdamOptions o;
  o.tier = offload::OptimizerStateTier::kHost;
  o.tile_elements = kTile;
  return o;
}

// With the engine, so the staging ring is registered as io_uring fixed buffers (the fault tests
// run without).
offload::OffloadedAdamOptions NvmeOptions(NvmeFixture& nvme) {
  offload::OffloadedAdamOptions o;
  o.tier = offload::OptimizerStateTier::kNvme;
  o.tile_elements = kTile;
  o.swap_store = nvme.store.get();
  o.aio_engine = nvme.engine.get();
  return o;
}

// (tier, param dtype, count)
class ExactnessTest
    : public ::testing::TestWithParam<std::tuple<offload::OptimizerStateTier, DType, int64_t>> {};

TEST_P(ExactnessTest, MatchesShardedAdamBitForBitOverSeveralSteps) {
  const auto [tier, dtype, count] = GetParam();
  auto device = MakeCpuDevice();
  const RunInputs inputs = MakeRunInputs(dtype, DType::kF32, count, 3, 11 + count);
  const StateAfter expected = RunShardedAdam(*device, inputs, 3);
  NvmeFixture nvme;
  const offload::OffloadedAdamOptions options =
      tier == offload::OptimizerStateTier::kNvme ? NvmeOptions(nvme) : HostOptions();
  Result<StateAfter> actual = RunOffloadedAdam(*device, inputs, 3, options);
  ASSERT_TRUE(actual.ok()) << actual.status().ToString();
  EXPECT_EQ(FirstDifference(expected, *actual), "");
  // The state really moved: a step changed the master weights.
  EXPECT_NE(expected.master, testing::ToF32(inputs.params, dtype));
}

INSTANTIATE_TEST_SUITE_P(
    TiersDtypesSizes, ExactnessTest,
    ::testing::Combine(::testing::Values(offload::OptimizerStateTier::kHost,
                                         offload::OptimizerStateTier::kNvme),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(int64_t{1}, int64_t{7}, kTile + 1, 3 * kTile + 5)),
    [](const auto& info) {
      return fmt::format("{}_{}_{}", offload::OptimizerStateTierName(std::get<0>(info.param)),
                         DTypeName(std::get<1>(info.param)), std::get<2>(info.param));
    });

// Gradients in their training dtype go device-to-host as they are and are widened inside the
// kernel: the same as ShardedAdam over the widened gradients.
TEST(OffloadedAdamTest, LowPrecisionGradientsMatchTheirWidenedValues) {
  auto device = MakeCpuDevice();
  for (DType grad : {DType::kBF16, DType::kF16}) {
    for (offload::OptimizerStateTier tier :
         {offload::OptimizerStateTier::kHost, offload::OptimizerStateTier::kNvme}) {
      SCOPED_TRACE(
          fmt::format("{} grads, {}", DTypeName(grad), offload::OptimizerStateTierName(tier)));
      const RunInputs inputs = MakeRunInputs(grad, grad, 2 * kTile + 3, 3, 5);
      const StateAfter expected = RunShardedAdam(*device, inputs, 3);
      NvmeFixture nvme;
      Result<StateAfter> actual = RunOffloadedAdam(
          *device, inputs, 3,
          tier == offload::OptimizerStateTier::kNvme ? NvmeOptions(nvme) : HostOptions());
      ASSERT_TRUE(actual.ok()) << actual.status().ToString();
      EXPECT_EQ(FirstDifference(expected, *actual), "");
    }
  }
}

// Also with the next step's first tiles prefetched (PrefetchState) while the last step's writes
// may still be in flight (pipeline_write leaves them to the next call).
TEST(OffloadedAdamTest, EveryPipelineSettingGivesTheSameBits) {
  auto device = MakeCpuDevice();
  const RunInputs inputs = MakeRunInputs(DType::kBF16, DType::kBF16, 6 * kTile + 9, 3, 21);
  const StateAfter expected = RunShardedAdam(*device, inputs, 3);
  for (int buffers : {1, 2, 3, 4, 7}) {
    for (bool read : {false, true}) {
      for (bool write : {false, true}) {
        for (bool prefetch : {false, true}) {
          SCOPED_TRACE(fmt::format("buffer_count {} read {} write {} prefetch {}", buffers, read,
                                   write, prefetch));
          NvmeFixture nvme;
          offload::OffloadedAdamOptions options = NvmeOptions(nvme);
          options.buffer_count = buffers;
          options.pipeline_read = read;
          options.pipeline_write = write;
          Result<StateAfter> actual = RunOffloadedAdam(*device, inputs, 3, options, prefetch);
          ASSERT_TRUE(actual.ok()) << actual.status().ToString();
          EXPECT_EQ(FirstDifference(expected, *actual), "");
        }
      }
    }
  }
}

// A prefetch moves the step's first reads out of Step: the step then issues reads only for the
// tiles past the ones prefetched (its read-issue bytes count the prefetched ones once).
TEST(OffloadedAdamTest, PrefetchedTilesAreReadOnceAndCountedInTheNextStep) {
  auto device = MakeCpuDevice();
  const int64_t count = 6 * kTile;
  const RunInputs inputs = MakeRunInputs(DType::kBF16, DType::kBF16, count, 2, 5);
  NvmeFixture nvme;
  offload::OffloadedAdamOptions options = NvmeOptions(nvme);
  options.buffer_count = 4;  // reads 2 tiles ahead: 3 prefetched
  DeviceBuffer params = testing::ToDevice(*device, inputs.params.data(), inputs.params.size(),
                                          MemoryCategory::kParams);
  auto adam =
      offload::OffloadedAdam::Create(*device, CpuOptimizerOf(testing::TestOptimizer()),
                                     DType::kBF16, params.data(), DType::kBF16, count, 1, options);
  ASSERT_TRUE(adam.ok()) << adam.status().ToString();
  ASSERT_TRUE((*adam)->LoadMasterFromParams().ok());
  for (int s = 0; s < 2; ++s) {
    DeviceBuffer grads = testing::ToDevice(*device, inputs.grads[s].data(), inputs.grads[s].size(),
                                           MemoryCategory::kGrads);
    ASSERT_TRUE((*adam)->PrefetchState(/*wait=*/true).ok());
    ASSERT_TRUE((*adam)->PrefetchState(/*wait=*/true).ok());  // nothing more to begin
    ASSERT_TRUE((*adam)->Step(grads.data(), inputs.lrs[s], inputs.scales[s]).ok());
    const offload::OffloadStepTimings& t = (*adam)->last_step_timings();
    EXPECT_EQ(t.nvme_bytes_read, t.nvme_bytes_written) << "step " << s + 1;
    EXPECT_EQ(t.tiles, 6);
    EXPECT_EQ(t.prefetched_tiles, 3);
  }
  const StateAfter expected = RunShardedAdam(*device, inputs, 2);
  std::vector<float> v(static_cast<size_t>(count));
  ASSERT_TRUE((*adam)->ReadState(0, count, nullptr, nullptr, v.data()).ok());
  EXPECT_EQ(0, std::memcmp(v.data(), expected.exp_avg_sq.data(), v.size() * sizeof(float)));
}

TEST(OffloadedAdamTest, RestoredStateContinuesExactly) {
  auto device = MakeCpuDevice();
  const RunInputs inputs = MakeRunInputs(DType::kBF16, DType::kF32, 3 * kTile + 1, 3, 9);
  const StateAfter after2 = RunShardedAdam(*device, inputs, 2);
  const StateAfter after3 = RunShardedAdam(*device, inputs, 3);
  for (offload::OptimizerStateTier tier :
       {offload::OptimizerStateTier::kHost, offload::OptimizerStateTier::kNvme}) {
    SCOPED_TRACE(offload::OptimizerStateTierName(tier));
    NvmeFixture nvme;
    std::vector<std::byte> zeros(inputs.params.size());
    DeviceBuffer params =
        testing::ToDevice(*device, zeros.data(), zeros.size(), MemoryCategory::kParams);
    auto adam = offload::OffloadedAdam::Create(
        *device, CpuOptimizerOf(testing::TestOptimizer()), inputs.param_dtype, params.data(),
        inputs.grad_dtype, inputs.count, 1,
        tier == offload::OptimizerStateTier::kNvme ? NvmeOptions(nvme) : HostOptions());
    ASSERT_TRUE(adam.ok()) << adam.status().ToString();
    // The restore asks for the state tile by tile, in order: it never holds more than a tile.
    const offload::OptimizerStateSource arrays = offload::StateArraysSource(
        after2.master.data(), after2.exp_avg.data(), after2.exp_avg_sq.data());
    int64_t next = 0;
    const offload::OptimizerStateSource recorded = [&](int64_t begin, int64_t n, float* master,
                                                       float* exp_avg, float* exp_avg_sq) {
      EXPECT_EQ(begin, next);
      EXPECT_LE(n, (*adam)->tiles().tile_elements);
      next = begin + n;
      return arrays(begin, n, master, exp_avg, exp_avg_sq);
    };
    ASSERT_TRUE((*adam)->RestoreState(recorded, 2).ok());
    EXPECT_EQ(next, inputs.count);
    // The parameter shard now holds the restored master weights in bf16.
    EXPECT_EQ(testing::FromDevice(*device, params), after2.params);
    DeviceBuffer grads = testing::ToDevice(*device, inputs.grads[2].data(), inputs.grads[2].size(),
                                           MemoryCategory::kGrads);
    ASSERT_TRUE((*adam)->Step(grads.data(), inputs.lrs[2], inputs.scales[2]).ok());
    EXPECT_EQ((*adam)->step(), 3);
    StateAfter actual;
    actual.master.resize(inputs.count);
    actual.exp_avg.resize(inputs.count);
    actual.exp_avg_sq.resize(inputs.count);
    ASSERT_TRUE((*adam)
                    ->ReadState(0, inputs.count, actual.master.data(), actual.exp_avg.data(),
                                actual.exp_avg_sq.data())
                    .ok());
    actual.params = testing::FromDevice(*device, params);
    EXPECT_EQ(FirstDifference(after3, actual), "");
    // A range across a tile boundary reads the same values.
    std::vector<float> part(10);
    ASSERT_TRUE((*adam)->ReadState(kTile - 4, 10, nullptr, part.data(), nullptr).ok());
    EXPECT_EQ(0, std::memcmp(part.data(), after3.exp_avg.data() + kTile - 4, 40));
    EXPECT_EQ((*adam)->ReadState(inputs.count - 1, 2, part.data(), nullptr, nullptr).code(),
              StatusCode::kOutOfRange);
  }
}

TEST(OffloadedAdamTest, StepBeforeTheMasterWeightsIsRefused) {
  auto device = MakeCpuDevice();
  std::vector<std::byte> zeros(64 * 2);
  DeviceBuffer params =
      testing::ToDevice(*device, zeros.data(), zeros.size(), MemoryCategory::kParams);
  DeviceBuffer grads =
      testing::ToDevice(*device, zeros.data(), zeros.size(), MemoryCategory::kGrads);
  auto adam = offload::OffloadedAdam::Create(*device, CpuOptimizerOf(testing::TestOptimizer()),
                                             DType::kBF16, params.data(), DType::kBF16, 64, 1,
                                             HostOptions());
  ASSERT_TRUE(adam.ok()) << adam.status().ToString();
  Status status = (*adam)->Step(grads.data(), 1e-3, 1.0);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("LoadMasterFromParams"));
}

// Budgets: the ring is buffer_count slots of one tile, pinned; host state is host; NVMe extents
// are nvme; the device gets nothing but the shards the caller owns, during the step too.
TEST(OffloadedAdamTest, ChargesEachTierWhatItHoldsAndNothingToTheDevice) {
  auto device = MakeCpuDevice();
  MemoryLedger& ledger = MemoryLedger::Global();
  const int64_t count = 5 * kTile + 17;
  const RunInputs inputs = MakeRunInputs(DType::kBF16, DType::kBF16, count, 1, 3);
  DeviceBuffer params = testing::ToDevice(*device, inputs.params.data(), inputs.params.size(),
                                          MemoryCategory::kParams);
  DeviceBuffer grads = testing::ToDevice(*device, inputs.grads[0].data(), inputs.grads[0].size(),
                                         MemoryCategory::kGrads);
  for (offload::OptimizerStateTier tier :
       {offload::OptimizerStateTier::kHost, offload::OptimizerStateTier::kNvme}) {
    SCOPED_TRACE(offload::OptimizerStateTierName(tier));
    NvmeFixture nvme;
    offload::OffloadedAdamOptions options =
        tier == offload::OptimizerStateTier::kNvme ? NvmeOptions(nvme) : HostOptions();
    options.buffer_count = 3;
    const MemorySnapshot before = ledger.Snapshot();
    auto adam = offload::OffloadedAdam::Create(*device, CpuOptimizerOf(testing::TestOptimizer()),
                                               DType::kBF16, params.data(), DType::kBF16, count, 1,
                                               options);
    ASSERT_TRUE(adam.ok()) << adam.status().ToString();
    const MemorySnapshot created = ledger.Snapshot();
    auto delta = [&](const MemorySnapshot& s, MemoryTier t) {
      return static_cast<int64_t>(s.tier(t).current) - static_cast<int64_t>(before.tier(t).current);
    };
    // One tile per slot: its gradients and parameters (2 + 2 bytes), plus p|m|v on NVMe.
    const int64_t per_element = tier == offload::OptimizerStateTier::kNvme ? 12 + 2 + 2 : 2 + 2;
    const int64_t tile_bytes = kTile * per_element;
    EXPECT_EQ(delta(created, MemoryTier::kHostPinned), 3 * tile_bytes);
    EXPECT_EQ((*adam)->pinned_bytes(), static_cast<uint64_t>(3 * tile_bytes));
    EXPECT_EQ(delta(created, MemoryTier::kDevice), 0);
    const int64_t page = sysconf(_SC_PAGESIZE);
    const int64_t state_bytes = 3 * ((count * 4 + page - 1) / page * page);
    if (tier == offload::OptimizerStateTier::kHost) {
      EXPECT_EQ(delta(created, MemoryTier::kHost), state_bytes);
      EXPECT_EQ(delta(created, MemoryTier::kNvme), 0);
    } else {
      EXPECT_EQ(delta(created, MemoryTier::kHost), 0);
      uint64_t extents = 0;
      for (const auto& e : nvme.store->Extents()) extents += e.capacity;
      EXPECT_EQ(delta(created, MemoryTier::kNvme), static_cast<int64_t>(extents));
      EXPECT_GE(extents, static_cast<uint64_t>(count * 12));
      EXPECT_EQ(nvme.store->Extents().size(), 6u);  // one extent per tile
    }
    ledger.ResetPeaks();
    ASSERT_TRUE((*adam)->LoadMasterFromParams().ok());
    ASSERT_TRUE((*adam)->Step(grads.data(), 1e-3, 1.0).ok());
    const MemorySnapshot stepped = ledger.Snapshot();
    EXPECT_EQ(stepped.tier(MemoryTier::kDevice).peak, before.tier(MemoryTier::kDevice).current);
    EXPECT_EQ(stepped.tier(MemoryTier::kHostPinned).peak,
              created.tier(MemoryTier::kHostPinned).current);
    EXPECT_EQ((*adam)->state_bytes(), 0u);
    adam->reset();
    const MemorySnapshot destroyed = ledger.Snapshot();
    for (MemoryTier t :
         {MemoryTier::kDevice, MemoryTier::kHostPinned, MemoryTier::kHost, MemoryTier::kNvme}) {
      EXPECT_EQ(delta(destroyed, t), 0) << MemoryTierName(t);
    }
    EXPECT_TRUE(nvme.store->Extents().empty());
  }
}

TEST(OffloadedAdamOptionsTest, TileAndRingComeFromTheConfig) {
  ZeroConfig zero = Config().zero;
  zero.offload_optimizer.device = OffloadDevice::kCpu;
  zero.offload_optimizer.buffer_count = 5;
  zero.offload_optimizer.pipeline_read = true;
  zero.offload_optimizer.pipeline_write = false;
  auto options = OffloadedAdamOptionsOf(zero.offload_optimizer, zero.sub_group_size, nullptr);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->tier, offload::OptimizerStateTier::kHost);
  EXPECT_EQ(options->tile_elements, offload::kDefaultOffloadTileElements);  // 1e9 is capped
  EXPECT_EQ(options->buffer_count, 5);
  EXPECT_TRUE(options->pipeline_read);
  EXPECT_FALSE(options->pipeline_write);
  zero.sub_group_size = 100000;
  EXPECT_EQ(
      OffloadedAdamOptionsOf(zero.offload_optimizer, zero.sub_group_size, nullptr)->tile_elements,
      98304);

  zero.offload_optimizer.device = OffloadDevice::kNvme;
  Status status =
      OffloadedAdamOptionsOf(zero.offload_optimizer, zero.sub_group_size, nullptr).status();
  EXPECT_THAT(status.message(), HasSubstr("nvme_path"));
  zero.offload_optimizer.device = OffloadDevice::kCpu;
  zero.offload_optimizer.buffer_count = 0;
  status = OffloadedAdamOptionsOf(zero.offload_optimizer, zero.sub_group_size, nullptr).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("offload_optimizer.buffer_count"));
  zero.offload_optimizer.buffer_count = 4;
  zero.sub_group_size = 100;
  EXPECT_THAT(OffloadedAdamOptionsOf(zero.offload_optimizer, zero.sub_group_size, nullptr)
                  .status()
                  .message(),
              HasSubstr("sub_group_size"));
  zero.offload_optimizer.device = OffloadDevice::kNone;
  zero.sub_group_size = 1 << 20;
  EXPECT_FALSE(OffloadedAdamOptionsOf(zero.offload_optimizer, zero.sub_group_size, nullptr).ok());
}

}  // namespace
}  // namespace sluice::zero
