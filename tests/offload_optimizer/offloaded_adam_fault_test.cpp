// OffloadedAdam on NVMe when the disk fails it: no room for the state (file size limit, full
// filesystem), a write that fails in the middle of a step, and an extent whose bytes changed on
// disk. Each error names the tile; what was stored before it stays intact.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "offload/nvme_state_store.h"
#include "offload/offloaded_adam.h"
#include "offload/swap_format.h"
#include "tests/offload_optimizer/offload_optimizer_test_util.h"

namespace sluice::zero {
namespace {

using offload::testutil::ScopedFileSizeLimit;
using offload::testutil::ScopedMount;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::MakeCpuDevice;
using testing::MakeRunInputs;
using testing::NvmeFixture;
using testing::RunInputs;
using testing::RunShardedAdam;
using testing::StateAfter;

constexpr int64_t kTile = 16 * offload::kOffloadTileQuantum;  // 32 Ki elements: 384 KiB extents

offload::OffloadedAdamOptions NvmeOptions(offload::SwapStore& store) {
  offload::OffloadedAdamOptions o;
  o.tier = offload::OptimizerStateTier::kNvme;
  o.tile_elements = kTile;
  o.swap_store = &store;
  return o;
}

// Where an extent's bytes are in the (single) swap file.
uint64_t FileOffsetOf(const NvmeFixture& nvme, const std::string& extent) {
  auto found = nvme.store->Find(extent);
  SLUICE_CHECK(found.ok()) << found.status().ToString();
  return offload::SwapDataOffset(offload::SwapSlotBytes(nvme.options.max_extents)) + found->offset;
}

// A swap store with an unrelated extent in it, written before the optimizer came.
void WriteBystander(NvmeFixture& nvme, offload::AlignedBuffer& data) {
  data = offload::testutil::PatternBuffer(1 << 20, 77);
  ASSERT_TRUE(nvme.store->Allocate("bystander", 1 << 20).ok());
  ASSERT_TRUE(nvme.store->Write("bystander", data.data(), 1 << 20).ok());
}

void ExpectBystanderIntact(NvmeFixture& nvme, const offload::AlignedBuffer& data) {
  auto back = offload::AlignedBuffer::Allocate(1 << 20);
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(nvme.store->Read("bystander", back->data(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(back->data(), data.data(), 1 << 20), 0);
}

TEST(OffloadedAdamFaultTest, NoRoomUnderTheFileSizeLimitNamesTheTileAndLeavesTheStoreAsItWas) {
  auto device = MakeCpuDevice();
  NvmeFixture nvme(/*capacity_bytes=*/0, /*growth_bytes=*/1 << 20, /*max_extents=*/64);
  offload::AlignedBuffer bystander;
  WriteBystander(nvme, bystander);
  std::vector<std::byte> zeros(8 * kTile * 2);
  DeviceBuffer params =
      testing::ToDevice(*device, zeros.data(), zeros.size(), MemoryCategory::kParams);
  const uint64_t extents_before = nvme.store->Extents().size();
  const uint64_t file_bytes = std::filesystem::file_size(nvme.store->file_paths()[0]);
  Status status;
  {
    // Room for about two more tiles' extents: a later one cannot be placed.
    ScopedFileSizeLimit limit(file_bytes + (1 << 20));
    status = offload::OffloadedAdam::Create(*device, CpuOptimizerOf(testing::TestOptimizer()),
                                            DType::kBF16, params.data(), DType::kBF16, 8 * kTile, 1,
                                            NvmeOptions(*nvme.store))
                 .status();
  }
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), ContainsRegex("tile [1-7] of 8"));
  EXPECT_THAT(status.message(), HasSubstr("(EFBIG)"));
  EXPECT_THAT(status.message(), HasSubstr("on NVMe"));
  EXPECT_EQ(nvme.store->Extents().size(), extents_before);  // the tiles placed were freed
  ExpectBystanderIntact(nvme, bystander);
}

TEST(OffloadedAdamFaultTest, AFullFilesystemNamesTheTile) {
  ScopedMount small("tmpfs", "size=4m");
  if (!small.ok()) GTEST_SKIP() << small.reason();
  auto device = MakeCpuDevice();
  auto engine = offload::AioEngine::Create(offload::AioOptions());
  ASSERT_TRUE(engine.ok());
  offload::SwapStoreOptions store_options;
  store_options.paths = {small.path()};
  store_options.capacity_bytes = 0;
  store_options.growth_bytes = 1 << 20;
  store_options.max_extents = 64;
  auto store = offload::SwapStore::Create(**engine, store_options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::byte> zeros(16 * kTile * 2);
  DeviceBuffer params =
      testing::ToDevice(*device, zeros.data(), zeros.size(), MemoryCategory::kParams);
  Status status = offload::OffloadedAdam::Create(*device, CpuOptimizerOf(testing::TestOptimizer()),
                                                 DType::kBF16, params.data(), DType::kBF16,
                                                 16 * kTile, 1, NvmeOptions(**store))
                      .status();
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), ContainsRegex("tile [0-9]+ of 16"));
  EXPECT_THAT(status.message(), HasSubstr("(ENOSPC)"));
  EXPECT_TRUE((*store)->Extents().empty());
}

// A write refused in the middle of a step (EFBIG past the file size limit) fails the step naming
// the tile; the tiles stored before it hold their new state, verified; the failed tile is marked
// unreadable rather than left stale; and the optimizer refuses to step again.
TEST(OffloadedAdamFaultTest, AWriteFailingMidStepNamesTheTileAndKeepsEarlierTiles) {
  for (bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "serial");
    auto device = MakeCpuDevice();
    NvmeFixture nvme(/*capacity_bytes=*/16 << 20, /*growth_bytes=*/0, /*max_extents=*/64);
    const int64_t count = 6 * kTile;
    const RunInputs inputs = MakeRunInputs(DType::kBF16, DType::kBF16, count, 2, 4);
    const StateAfter expected = RunShardedAdam(*device, inputs, 2);
    DeviceBuffer params = testing::ToDevice(*device, inputs.params.data(), inputs.params.size(),
                                            MemoryCategory::kParams);
    offload::OffloadedAdamOptions options = NvmeOptions(*nvme.store);
    options.pipeline_read = pipelined;
    options.pipeline_write = pipelined;
    auto adam = offload::OffloadedAdam::Create(*device, CpuOptimizerOf(testing::TestOptimizer()),
                                               DType::kBF16, params.data(), DType::kBF16, count, 1,
                                               options);
    ASSERT_TRUE(adam.ok()) << adam.status().ToString();
    ASSERT_TRUE((*adam)->LoadMasterFromParams().ok());
    DeviceBuffer grads0 = testing::ToDevice(*device, inputs.grads[0].data(), inputs.grads[0].size(),
                                            MemoryCategory::kGrads);
    ASSERT_TRUE((*adam)->Step(grads0.data(), inputs.lrs[0], inputs.scales[0]).ok());

    constexpr int kFailing = 3;
    // Extents are placed in tile order, so every tile from kFailing on lies past the limit.
    const uint64_t limit_at = FileOffsetOf(nvme, offload::NvmeStateStore::ExtentName(kFailing));
    ASSERT_GT(limit_at, FileOffsetOf(nvme, offload::NvmeStateStore::ExtentName(kFailing - 1)));
    DeviceBuffer grads1 = testing::ToDevice(*device, inputs.grads[1].data(), inputs.grads[1].size(),
                                            MemoryCategory::kGrads);
    Status status;
    {
      ScopedFileSizeLimit limit(limit_at);
      status = (*adam)->Step(grads1.data(), inputs.lrs[1], inputs.scales[1]);
      if (pipelined) {
        // The last tiles' writes (3 of them fail) are left in flight: the step returns, and the
        // next call that touches the state reports the first failing tile and the step.
        ASSERT_TRUE(status.ok()) << status.ToString();
        float one = 0;
        status = (*adam)->ReadState(0, 1, &one, nullptr, nullptr);
        EXPECT_THAT(status.message(), HasSubstr("optimizer step 2"));
      }
    }
    ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr("tile 3 of 6"));
    EXPECT_THAT(status.message(), HasSubstr("writing the state of"));
    EXPECT_THAT(status.message(), HasSubstr("(EFBIG)"));
    EXPECT_EQ((*adam)->step(), pipelined ? 2 : 1);

    // Nothing earlier is lost: tiles 0..2 read back (checksums verified) as after step 2.
    const int64_t kept = kFailing * kTile;
    std::vector<float> master(kept), m(kept), v(kept);
    ASSERT_TRUE((*adam)->ReadState(0, kept, master.data(), m.data(), v.data()).ok());
    EXPECT_EQ(0, std::memcmp(master.data(), expected.master.data(), kept * 4));
    EXPECT_EQ(0, std::memcmp(m.data(), expected.exp_avg.data(), kept * 4));
    EXPECT_EQ(0, std::memcmp(v.data(), expected.exp_avg_sq.data(), kept * 4));
    Status failed_tile = (*adam)->ReadState(kept, 1, master.data(), nullptr, nullptr);
    EXPECT_EQ(failed_tile.code(), StatusCode::kFailedPrecondition) << failed_tile.ToString();
    EXPECT_THAT(failed_tile.message(), HasSubstr("tile 3 of 6"));

    Status again = (*adam)->Step(grads1.data(), inputs.lrs[1], inputs.scales[1]);
    EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(again.message(), HasSubstr("restore it from a checkpoint"));

    // Restoring the state of step 1 (a checkpoint) makes it usable again, and the retried step
    // lands exactly where it should have.
    const StateAfter after1 = RunShardedAdam(*device, inputs, 1);
    ASSERT_TRUE(
        (*adam)
            ->RestoreState(offload::StateArraysSource(after1.master.data(), after1.exp_avg.data(),
                                                      after1.exp_avg_sq.data()),
                           1)
            .ok());
    ASSERT_TRUE((*adam)->Step(grads1.data(), inputs.lrs[1], inputs.scales[1]).ok());
    std::vector<float> all(count);
    ASSERT_TRUE((*adam)->ReadState(0, count, nullptr, nullptr, all.data()).ok());
    EXPECT_EQ(0, std::memcmp(all.data(), expected.exp_avg_sq.data(), count * 4));
    EXPECT_EQ(testing::FromDevice(*device, params), expected.params);
  }
}

TEST(OffloadedAdamFaultTest, ACorruptedExtentIsDetectedNamingTheTile) {
  auto device = MakeCpuDevice();
  NvmeFixture nvme(/*capacity_bytes=*/16 << 20, /*growth_bytes=*/0, /*max_extents=*/64);
  const int64_t count = 4 * kTile + 100;
  const RunInputs inputs = MakeRunInputs(DType::kF16, DType::kF16, count, 2, 8);
  DeviceBuffer params = testing::ToDevice(*device, inputs.params.data(), inputs.params.size(),
                                          MemoryCategory::kParams);
  auto adam = offload::OffloadedAdam::Create(*device, CpuOptimizerOf(testing::TestOptimizer()),
                                             DType::kF16, params.data(), DType::kF16, count, 1,
                                             NvmeOptions(*nvme.store));
  ASSERT_TRUE(adam.ok()) << adam.status().ToString();
  ASSERT_TRUE((*adam)->LoadMasterFromParams().ok());
  DeviceBuffer grads = testing::ToDevice(*device, inputs.grads[0].data(), inputs.grads[0].size(),
                                         MemoryCategory::kGrads);
  ASSERT_TRUE((*adam)->Step(grads.data(), inputs.lrs[0], inputs.scales[0]).ok());
  float first = 0;  // a state read settles the writes the step left in flight
  ASSERT_TRUE((*adam)->ReadState(0, 1, &first, nullptr, nullptr).ok());

  // One float of tile 2's exp_avg changes on disk behind the store's back.
  const std::string path = nvme.store->file_paths()[0];
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const float bad = 12345.0f;
  ASSERT_EQ(pwrite(fd, &bad, sizeof(bad),
                   FileOffsetOf(nvme, offload::NvmeStateStore::ExtentName(2)) + (kTile + 5) * 4),
            static_cast<ssize_t>(sizeof(bad)));
  ASSERT_EQ(fsync(fd), 0);
  close(fd);

  Status status = (*adam)->Step(grads.data(), inputs.lrs[1], inputs.scales[1]);
  ASSERT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("tile 2 of 5"));
  EXPECT_THAT(status.message(), HasSubstr("reading the state of"));
  EXPECT_THAT(status.message(), HasSubstr("checksum mismatch"));
  EXPECT_THAT(status.message(), HasSubstr("subgroup2.adam_state"));
}

}  // namespace
}  // namespace sluice::zero
