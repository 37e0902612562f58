// How much disk a swap store takes: it grows by what an allocation lacks (or once, to a known
// total, with EnsureRoom), rounded up to whole stripe rows, and its files then hold exactly what
// SwapStoreDiskBytes (the memory estimate's figure) says; a store filled that way fits a file
// size limit just above that figure. Each runs on every I/O path.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "offload/swap_format.h"
#include "offload/swap_store.h"
#include "tests/offload/test_support.h"

namespace sluice::offload {
namespace {

using ::testing::HasSubstr;
using testutil::AllIoPaths;
using testutil::IoPath;
using testutil::OptionsFor;
using testutil::ScopedFileSizeLimit;
using testutil::TempDir;

// Odd sizes, none a multiple of 4096, adding up to a few MiB: an optimizer's tiles of a small
// model, say.
std::vector<uint64_t> ExtentSizes() {
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < 13; ++i) sizes.push_back(100'000 + 37'123 * i);
  return sizes;
}

uint64_t CapacityOf(const std::vector<uint64_t>& sizes) {
  uint64_t total = 0;
  for (uint64_t size : sizes) total += AlignUp(size, kIoAlignment);
  return total;
}

// What the store's files and lock files take: their sizes in whole 4 KiB blocks (the files are
// preallocated, so every block of them is allocated), and the blocks the file system reports.
struct Usage {
  uint64_t blocks = 0;     // sum of AlignUp(st_size, 4096)
  uint64_t allocated = 0;  // sum of st_blocks x 512
  uint64_t files = 0;
};

Usage UsageOf(const SwapStore& store) {
  Usage usage;
  for (const std::string& file : store.file_paths()) {
    for (const std::string& path : {file, file + ".lock"}) {
      struct stat st {};
      EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
      usage.blocks += AlignUp(static_cast<uint64_t>(st.st_size), kIoAlignment);
      usage.allocated += static_cast<uint64_t>(st.st_blocks) * 512;
      ++usage.files;
    }
  }
  return usage;
}

// The blocks the store's files take are what SwapStoreDiskBytes says; the file system's own count
// may differ by its metadata: ext4 adds an extent index block to a file of more than 4 extents
// (growth steps and the header writes into preallocated space split extents).
void ExpectDiskBytes(const SwapStore& store, uint64_t expected) {
  const Usage usage = UsageOf(store);
  EXPECT_EQ(usage.blocks, expected);
  EXPECT_LE(usage.allocated, expected + usage.files * kIoAlignment);
  EXPECT_GE(usage.allocated + usage.files * kIoAlignment, expected);
}

class SwapGrowthTest : public ::testing::TestWithParam<IoPath> {
 protected:
  void SetUp() override {
    const std::string reason = testutil::SkipReason(GetParam(), dir_.path());
    if (!reason.empty()) GTEST_SKIP() << reason;
    auto engine = AioEngine::Create(OptionsFor(GetParam()));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }

  // The engine's stores: nothing preallocated, the default growth step and geometry.
  SwapStoreOptions StoreOptions(int dirs) const {
    SwapStoreOptions options;
    for (int i = 0; i < dirs; ++i) options.paths.push_back(dir_.Subdir("nvme" + std::to_string(i)));
    return options;
  }

  TempDir dir_;
  std::unique_ptr<AioEngine> engine_;
};

TEST_P(SwapGrowthTest, ExtentByExtentTheStoreTakesWhatSwapStoreDiskBytesSays) {
  for (int dirs : {1, 2}) {
    SCOPED_TRACE(dirs);
    const SwapStoreOptions options = StoreOptions(dirs);
    auto store = SwapStore::Create(*engine_, options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const std::vector<uint64_t> sizes = ExtentSizes();
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_TRUE((*store)->Allocate(fmt::format("t{}", i), sizes[i]).ok()) << i;
    }
    const uint64_t extents = CapacityOf(sizes);
    const uint64_t row = options.stripe_size * static_cast<uint64_t>(dirs);
    EXPECT_EQ((*store)->capacity(), AlignUp(extents, row));
    EXPECT_LT((*store)->free_bytes(), row);
    ExpectDiskBytes(**store, SwapStoreDiskBytes(options, extents));
    // The figure itself: per file the 2 MiB before the data (two 516 KiB header slots for 4096
    // extents) and a lock file block, then the extents in whole rows.
    EXPECT_EQ(SwapStoreDiskBytes(options, extents),
              dirs * ((2u << 20) + 4096) + AlignUp(extents, row));
    ASSERT_TRUE((*store)->Close().ok());
  }
}

TEST_P(SwapGrowthTest, EnsureRoomGrowsOnceToTheTotalAndAllocationsThenFitInAnyOrder) {
  const SwapStoreOptions options = StoreOptions(2);
  auto store = SwapStore::Create(*engine_, options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<uint64_t> sizes = ExtentSizes();
  const uint64_t extents = CapacityOf(sizes);
  ASSERT_TRUE((*store)->EnsureRoom(extents).ok());
  const uint64_t capacity = (*store)->capacity();
  EXPECT_EQ(capacity, AlignUp(extents, 2 * options.stripe_size));
  const uint64_t generation = (*store)->generation();
  EXPECT_TRUE((*store)->EnsureRoom(extents).ok());  // already there: nothing changes
  EXPECT_EQ((*store)->generation(), generation);
  std::reverse(sizes.begin(), sizes.end());
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE((*store)->Allocate(fmt::format("t{}", i), sizes[i]).ok()) << i;
  }
  EXPECT_EQ((*store)->capacity(), capacity);
  ExpectDiskBytes(**store, SwapStoreDiskBytes(options, extents));

  // Room taken by extents is not room: asking again grows by what the free end lacks.
  ASSERT_TRUE((*store)->EnsureRoom(3 << 20).ok());
  EXPECT_EQ((*store)->capacity(), AlignUp(extents + (3 << 20), 2 * options.stripe_size));
}

TEST_P(SwapGrowthTest, EnsureRoomRespectsDisabledGrowth) {
  SwapStoreOptions options = StoreOptions(1);
  options.capacity_bytes = 1 << 20;
  options.growth_bytes = 0;
  auto store = SwapStore::Create(*engine_, options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->EnsureRoom(1 << 20).ok());
  const Status status = (*store)->EnsureRoom((1 << 20) + 1);
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("growth is disabled"));
  EXPECT_THAT(status.message(), HasSubstr("making room for 1048577 bytes"));
  EXPECT_EQ((*store)->capacity(), 1u << 20);
}

// The failure, at the store: a run whose estimate said a few MiB failed with ENOSPC (or
// EFBIG under `ulimit -f`) because the store grew 256 MiB at once. Each file may now grow only
// one 4 KiB block past what SwapStoreDiskBytes counts for it, and the store still fills.
TEST_P(SwapGrowthTest, AStoreFitsAFileSizeLimitJustAboveItsEstimate) {
  const SwapStoreOptions options = StoreOptions(1);
  const std::vector<uint64_t> sizes = ExtentSizes();
  const uint64_t file_bytes = SwapStoreDiskBytes(options, CapacityOf(sizes)) - kSwapLockFileBytes;
  Status status;
  {
    ScopedFileSizeLimit limit(file_bytes + 4096);
    auto store = SwapStore::Create(*engine_, options);
    status = store.status();
    for (size_t i = 0; status.ok() && i < sizes.size(); ++i) {
      status = (*store)->Allocate(fmt::format("t{}", i), sizes[i]).status();
    }
  }
  EXPECT_TRUE(status.ok()) << status.ToString();
}

INSTANTIATE_TEST_SUITE_P(AllPaths, SwapGrowthTest, ::testing::ValuesIn(AllIoPaths()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sluice::offload
