// OffloadedAdam with a CUDA device: the gradient and parameter shards in GPU memory, the staging
// ring in cudaHostAlloc memory, real D2H / H2D copies on streams. The result must still be
// ShardedAdam's (run on the cpu device) bit for bit. Skips without a GPU.
#include <gtest/gtest.h>

#include "offload/offloaded_adam.h"
#include "runtime/device/device_factory.h"
#include "tests/offload_optimizer/offload_optimizer_test_util.h"

namespace sluice::zero {
namespace {

TEST(OffloadedAdamGpuTest, MatchesShardedAdamWithTheShardsInGpuMemory) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA GPU (or a build without CUDA)";
  DeviceOptions options;
  options.kind = DeviceKind::kCuda;
  auto gpu = CreateDevice(options);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  auto cpu = testing::MakeCpuDevice();
  for (offload::OptimizerStateTier tier :
       {offload::OptimizerStateTier::kHost, offload::OptimizerStateTier::kNvme}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(fmt::format("{} {}", offload::OptimizerStateTierName(tier), DTypeName(dtype)));
      const testing::RunInputs inputs =
          testing::MakeRunInputs(dtype, dtype, 5 * offload::kOffloadTileQuantum + 3, 3, 17);
      const testing::StateAfter expected = testing::RunShardedAdam(*cpu, inputs, 3);
      testing::NvmeFixture nvme;
      offload::OffloadedAdamOptions adam_options;
      adam_options.tier = tier;
      adam_options.tile_elements = offload::kOffloadTileQuantum;
      if (tier == offload::OptimizerStateTier::kNvme) adam_options.swap_store = nvme.store.get();
      Result<testing::StateAfter> actual =
          testing::RunOffloadedAdam(**gpu, inputs, 3, adam_options);
      ASSERT_TRUE(actual.ok()) << actual.status().ToString();
      EXPECT_EQ(testing::FirstDifference(expected, *actual), "");
    }
  }
}

}  // namespace
}  // namespace sluice::zero
