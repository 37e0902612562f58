// The swap store on every I/O path: allocation, checksummed round trips, reopening with header
// validation, corruption and range errors.
#include "offload/swap_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "offload/chunked_checksum.h"
#include "offload/swap_format.h"
#include "tests/offload/test_support.h"

namespace sluice::offload {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testutil::AllIoPaths;
using testutil::IoPath;
using testutil::OptionsFor;
using testutil::PatternBuffer;
using testutil::TempDir;
using testutil::ZeroBuffer;

class SwapStoreTest : public ::testing::TestWithParam<IoPath> {
 protected:
  void SetUp() override {
    const std::string reason = testutil::SkipReason(GetParam(), dir_.path());
    if (!reason.empty()) GTEST_SKIP() << reason;
    auto engine = AioEngine::Create(OptionsFor(GetParam()));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }

  SwapStoreOptions StoreOptions(int dirs = 1) const {
    SwapStoreOptions options;
    for (int i = 0; i < dirs; ++i) options.paths.push_back(dir_.Subdir("nvme" + std::to_string(i)));
    options.capacity_bytes = 16 << 20;
    options.stripe_size = 256 << 10;
    options.max_extents = 64;
    options.checksum_chunk_bytes = 64 << 10;
    return options;
  }

  std::unique_ptr<SwapStore> Create(const SwapStoreOptions& options) {
    auto store = SwapStore::Create(*engine_, options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return std::move(store).value();
  }

  // Flips one byte of an extent's data directly in its file.
  static void FlipByte(const SwapStore& store, const SwapExtent& extent, uint64_t at,
                       const SwapStoreOptions& options) {
    const uint64_t slot = SwapSlotBytes(options.max_extents);
    const uint64_t logical = extent.offset + at;
    const size_t n = options.paths.size();
    const uint64_t stripe = logical / options.stripe_size;
    const uint64_t physical =
        SwapDataOffset(slot) +
        (n == 1 ? logical : (stripe / n) * options.stripe_size + logical % options.stripe_size);
    const std::string& path = store.file_paths()[n == 1 ? 0 : stripe % n];
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, static_cast<off_t>(physical)), 1);
    byte ^= 0x20;
    ASSERT_EQ(pwrite(fd, &byte, 1, static_cast<off_t>(physical)), 1);
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
  }

  TempDir dir_;
  std::unique_ptr<AioEngine> engine_;
};

TEST_P(SwapStoreTest, OptimizerStateRoundTripsWithChecksums) {
  const SwapStoreOptions options = StoreOptions();
  auto store = Create(options);
  const SwapTensorKind kinds[] = {SwapTensorKind::kParams, SwapTensorKind::kExpAvg,
                                  SwapTensorKind::kExpAvgSq, SwapTensorKind::kGrads};
  // Odd lengths: not multiples of 4096, and one of them spans several checksum pieces.
  const uint64_t lengths[] = {1000, 123457, (2 << 20) + 12};
  std::vector<AlignedBuffer> sources;
  std::vector<SwapHandle> writes;
  int seed = 0;
  for (int group = 0; group < 3; ++group) {
    for (SwapTensorKind kind : kinds) {
      const std::string name = SwapTensorName(group, kind);
      const uint64_t length = lengths[group];
      auto extent = store->Allocate(name, length);
      ASSERT_TRUE(extent.ok()) << extent.status().ToString();
      EXPECT_EQ(extent->offset % 4096, 0u);
      EXPECT_GE(extent->capacity, length);
      sources.push_back(PatternBuffer(length, ++seed));
      writes.push_back(store->WriteAsync(name, sources.back().data(), length));
    }
  }
  for (SwapHandle& write : writes) ASSERT_TRUE(write.Wait().ok());
  seed = 0;
  for (int group = 0; group < 3; ++group) {
    for (SwapTensorKind kind : kinds) {
      const std::string name = SwapTensorName(group, kind);
      const uint64_t length = lengths[group];
      AlignedBuffer back = ZeroBuffer(length);
      ASSERT_TRUE(store->Read(name, back.data(), length).ok()) << name;
      EXPECT_EQ(std::memcmp(back.data(), sources[seed++].data(), length), 0) << name;
      auto extent = store->Find(name);
      EXPECT_TRUE(extent->written);
      EXPECT_TRUE(extent->checksummed);
      EXPECT_EQ(extent->length, length);
    }
  }
  EXPECT_EQ(SwapTensorName(7, SwapTensorKind::kExpAvgSq), "subgroup7.exp_avg_sq");
}

TEST_P(SwapStoreTest, ScratchStoreRemovesItsFilesOnClose) {
  SwapStoreOptions options = StoreOptions(2);
  options.remove_on_close = true;
  std::unique_ptr<SwapStore> store = Create(options);
  const std::vector<std::string> files = store->file_paths();
  ASSERT_EQ(files.size(), 2u);
  for (const std::string& f : files) EXPECT_TRUE(std::filesystem::exists(f)) << f;
  ASSERT_TRUE(store->Close().ok());
  for (const std::string& f : files) EXPECT_FALSE(std::filesystem::exists(f)) << f;

  options.remove_on_close = false;  // a kept store stays
  store = Create(options);
  ASSERT_TRUE(store->Close().ok());
  for (const std::string& f : store->file_paths()) EXPECT_TRUE(std::filesystem::exists(f)) << f;
}

// A scratch store that cannot be created (no room for its capacity) leaves no files behind.
TEST_P(SwapStoreTest, ScratchStoreThatFailsToBeCreatedLeavesNoFiles) {
  SwapStoreOptions options = StoreOptions(2);
  options.remove_on_close = true;
  Status created;
  {
    testutil::ScopedFileSizeLimit limit(1 << 20);  // far below the 16 MiB capacity
    created = SwapStore::Create(*engine_, options).status();
  }
  ASSERT_FALSE(created.ok());
  for (const std::string& dir : options.paths) {
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << dir << " keeps a file of the failed store";
  }
}

TEST_P(SwapStoreTest, MissingDirectoryIsCreatedAndAnImpossibleOneNamed) {
  SwapStoreOptions options = StoreOptions();
  options.paths = {dir_.path() + "/not/yet/there"};
  std::unique_ptr<SwapStore> store = Create(options);
  EXPECT_TRUE(std::filesystem::is_directory(options.paths[0]));

  options.paths = {"/proc/self/status/swap"};  // under a file: can never be a directory
  Status status = SwapStore::Create(*engine_, options).status();
  EXPECT_EQ(status.code(), StatusCode::kIoError) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("/proc/self/status/swap"));
  EXPECT_THAT(status.message(), HasSubstr("nvme_path"));
}

TEST_P(SwapStoreTest, StripedStoreRoundTripsAndReopens) {
  const SwapStoreOptions options = StoreOptions(3);
  constexpr uint64_t kLength = (3 << 20) + 777;
  const AlignedBuffer source = PatternBuffer(kLength, 21);
  {
    auto store = Create(options);
    ASSERT_EQ(store->file_paths().size(), 3u);
    ASSERT_TRUE(store->Allocate("striped", kLength).ok());
    ASSERT_TRUE(store->Write("striped", source.data(), kLength).ok());
    ASSERT_TRUE(store->Close().ok());
  }
  // Every stripe file holds data: the extent spans more than one row of stripes.
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(std::filesystem::file_size(options.paths[i] + "/sluice_swap.rank0.swp"),
              SwapDataOffset(SwapSlotBytes(options.max_extents)));
  }
  auto reopened = SwapStore::Open(*engine_, options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  AlignedBuffer back = ZeroBuffer(kLength);
  ASSERT_TRUE((*reopened)->Read("striped", back.data(), kLength).ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kLength), 0);
}

TEST_P(SwapStoreTest, ReopenRestoresTheExtentTable) {
  const SwapStoreOptions options = StoreOptions();
  const AlignedBuffer a = PatternBuffer(50000, 31);
  const AlignedBuffer b = PatternBuffer(70000, 32);
  std::vector<SwapExtent> before;
  {
    auto store = Create(options);
    ASSERT_TRUE(store->Allocate("a", 50000).ok());
    ASSERT_TRUE(store->Allocate("b", 70000).ok());
    ASSERT_TRUE(store->Allocate("never_written", 4096).ok());
    ASSERT_TRUE(store->Write("a", a.data(), 50000).ok());
    ASSERT_TRUE(store->Write("b", b.data(), 70000).ok());
    before = store->Extents();
  }  // the destructor closes, which flushes the header
  auto store = SwapStore::Open(*engine_, options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::vector<SwapExtent> after = (*store)->Extents();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].name, before[i].name);
    EXPECT_EQ(after[i].offset, before[i].offset);
    EXPECT_EQ(after[i].length, before[i].length);
    EXPECT_EQ(after[i].checksum, before[i].checksum);
    EXPECT_EQ(after[i].written, before[i].written);
  }
  AlignedBuffer back = ZeroBuffer(70000);
  ASSERT_TRUE((*store)->Read("b", back.data(), 70000).ok());
  EXPECT_EQ(std::memcmp(back.data(), b.data(), 70000), 0);
  // The allocator knows the reopened extents: a new one does not overlap them.
  auto c = (*store)->Allocate("c", 8192);
  ASSERT_TRUE(c.ok());
  for (const SwapExtent& extent : after) {
    EXPECT_TRUE(c->offset >= extent.offset + extent.capacity ||
                c->offset + c->capacity <= extent.offset);
  }
}

TEST_P(SwapStoreTest, ReopenNamesTheMismatchingField) {
  SwapStoreOptions options = StoreOptions(2);
  { auto store = Create(options); }
  struct Case {
    std::function<void(SwapStoreOptions&)> change;
    const char* field;
  };
  const std::vector<Case> cases = {
      {[](SwapStoreOptions& o) {
         o.file_name = "sluice_swap.rank0.swp";
         o.rank = 1;
       },
       "'rank'"},
      {[](SwapStoreOptions& o) { o.stripe_size = 128 << 10; }, "'stripe_size'"},
      {[](SwapStoreOptions& o) { std::swap(o.paths[0], o.paths[1]); }, "'stripe_index'"},
      {[](SwapStoreOptions& o) { o.paths.pop_back(); }, "'stripe_count'"},
  };
  for (const Case& c : cases) {
    SwapStoreOptions changed = options;
    c.change(changed);
    Status status = SwapStore::Open(*engine_, changed).status();
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(c.field)) << status.ToString();
  }
  // Stripe files of two different stores do not combine.
  SwapStoreOptions other = options;
  other.paths = {dir_.Subdir("other0"), dir_.Subdir("other1")};
  { auto store = Create(other); }
  std::filesystem::copy_file(other.paths[1] + "/sluice_swap.rank0.swp",
                             options.paths[1] + "/sluice_swap.rank0.swp",
                             std::filesystem::copy_options::overwrite_existing);
  Status status = SwapStore::Open(*engine_, options).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("'store_id'")) << status.ToString();
  // A missing store is NotFound naming the file.
  SwapStoreOptions missing = options;
  missing.paths = {dir_.Subdir("empty")};
  status = SwapStore::Open(*engine_, missing).status();
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("sluice_swap.rank0.swp"));
}

TEST_P(SwapStoreTest, TornNewestHeaderFallsBackToThePreviousGeneration) {
  const SwapStoreOptions options = StoreOptions();
  uint64_t generation = 0;
  std::string path;
  {
    auto store = Create(options);
    ASSERT_TRUE(store->Allocate("first", 4096).ok());
    ASSERT_TRUE(store->Allocate("second", 4096).ok());
    ASSERT_TRUE(store->Flush().ok());
    generation = store->generation();
    path = store->file_paths()[0];
    ASSERT_TRUE(store->Close().ok());  // writes generation + 1
  }
  // Corrupt the extent table of the newest slot.
  const uint64_t slot_bytes = SwapSlotBytes(options.max_extents);
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const char junk = 'X';
  ASSERT_EQ(pwrite(fd, &junk, 1, static_cast<off_t>(((generation + 1) % 2) * slot_bytes + 300)), 1);
  {
    auto store = SwapStore::Open(*engine_, options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->generation(), generation);
    EXPECT_EQ((*store)->Extents().size(), 2u);
    ASSERT_TRUE((*store)->Close().ok());  // writes generation + 1 into the torn slot
  }
  // Corrupt both slots: nothing valid remains, and the error names the checksum.
  for (int slot = 0; slot < 2; ++slot) {
    ASSERT_EQ(pwrite(fd, &junk, 1, static_cast<off_t>(slot * slot_bytes + 300)), 1);
  }
  close(fd);
  Status status = SwapStore::Open(*engine_, options).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("'header_checksum'"));
  // Not a swap file at all: the magic is named.
  const int fd2 = open(path.c_str(), O_RDWR);
  const char zeros[8] = {};
  ASSERT_EQ(pwrite(fd2, zeros, 8, 0), 8);
  ASSERT_EQ(pwrite(fd2, zeros, 8, static_cast<off_t>(slot_bytes)), 8);
  close(fd2);
  status = SwapStore::Open(*engine_, options).status();
  EXPECT_THAT(status.message(), HasSubstr("'magic'")) << status.ToString();
}

TEST_P(SwapStoreTest, FlippedByteIsDetectedAndNamesTheExtent) {
  for (int dirs : {1, 2}) {
    SCOPED_TRACE(testing::Message() << dirs << " directories");
    SwapStoreOptions options = StoreOptions(dirs);
    options.paths.clear();
    for (int i = 0; i < dirs; ++i) {
      options.paths.push_back(dir_.Subdir("flip" + std::to_string(dirs) + std::to_string(i)));
    }
    auto store = Create(options);
    constexpr uint64_t kLength = (1 << 20) + 5000;
    const AlignedBuffer source = PatternBuffer(kLength, 41);
    ASSERT_TRUE(store->Allocate("subgroup0.exp_avg", kLength).ok());
    ASSERT_TRUE(store->Allocate("subgroup0.exp_avg_sq", kLength).ok());
    ASSERT_TRUE(store->Write("subgroup0.exp_avg", source.data(), kLength).ok());
    ASSERT_TRUE(store->Write("subgroup0.exp_avg_sq", source.data(), kLength).ok());
    const SwapExtent extent = *store->Find("subgroup0.exp_avg_sq");
    FlipByte(*store, extent, kLength - 17, options);
    AlignedBuffer back = ZeroBuffer(kLength);
    Status status = store->Read("subgroup0.exp_avg_sq", back.data(), kLength);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr("'subgroup0.exp_avg_sq'"));
    EXPECT_THAT(status.message(), HasSubstr("checksum mismatch"));
    // 64 KiB checksum chunks: the flipped byte lies in chunk 16 of 17.
    EXPECT_THAT(status.message(), HasSubstr("first bad checksum chunk: 16 of 17 (extent bytes "
                                            "[1048576, 1114112)"));
    // The neighbour is intact.
    EXPECT_TRUE(store->Read("subgroup0.exp_avg", back.data(), kLength).ok());
    // Flipping a byte of the padding after `length` is not corruption of the tensor.
    FlipByte(*store, *store->Find("subgroup0.exp_avg"), kLength + 10, options);
    EXPECT_TRUE(store->Read("subgroup0.exp_avg", back.data(), kLength).ok());
  }
}

TEST_P(SwapStoreTest, FlippedByteIsDetectedAfterReopenWithTheRecordedChunkSize) {
  SwapStoreOptions options = StoreOptions();
  constexpr uint64_t kLength = (3 << 20) + 100;
  const AlignedBuffer source = PatternBuffer(kLength, 43);
  {
    auto store = Create(options);
    ASSERT_TRUE(store->Allocate("subgroup1.params", kLength).ok());
    ASSERT_TRUE(store->Write("subgroup1.params", source.data(), kLength).ok());
    EXPECT_EQ(store->Find("subgroup1.params")->checksum_chunk_bytes, 64u << 10);
    EXPECT_EQ(store->Find("subgroup1.params")->checksum,
              ChunkedChecksum64(source.data(), kLength, 16));
  }
  // Reopened with another chunk size: the extent is verified with the one it was written with.
  options.checksum_chunk_bytes = 1 << 20;
  auto store = SwapStore::Open(*engine_, options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const SwapExtent extent = *(*store)->Find("subgroup1.params");
  EXPECT_EQ(extent.checksum_chunk_bytes, 64u << 10);
  AlignedBuffer back = ZeroBuffer(kLength);
  ASSERT_TRUE((*store)->Read("subgroup1.params", back.data(), kLength).ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kLength), 0);
  FlipByte(**store, extent, 2 << 20, options);
  Status status = (*store)->Read("subgroup1.params", back.data(), kLength);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("'subgroup1.params'"));
  // Chunk checksums are not persisted: after a reopen only the extent can be named.
  EXPECT_THAT(status.message(), Not(HasSubstr("checksum chunk")));
  // A new write uses today's chunk size.
  ASSERT_TRUE((*store)->Write("subgroup1.params", source.data(), kLength).ok());
  EXPECT_EQ((*store)->Find("subgroup1.params")->checksum_chunk_bytes, 1u << 20);
  ASSERT_TRUE((*store)->Read("subgroup1.params", back.data(), kLength).ok());
}

TEST_P(SwapStoreTest, ShortTransfersAreResubmittedAndChecksummedOnce) {
  AioOptions aio = OptionsFor(GetParam());
  aio.block_size = 96 << 10;
  aio.intra_op_parallelism = 2;
  aio.debug_short_io_bytes = 20480;  // every completion "moves" at most 20 KiB
  auto engine = AioEngine::Create(aio);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto store = SwapStore::Create(**engine, StoreOptions(2));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  constexpr uint64_t kLength = (1 << 20) + 3000;
  const AlignedBuffer source = PatternBuffer(kLength, 47);
  ASSERT_TRUE((*store)->Allocate("g", kLength).ok());
  ASSERT_TRUE((*store)->Write("g", source.data(), kLength).ok());
  EXPECT_EQ((*store)->Find("g")->checksum, ChunkedChecksum64(source.data(), kLength, 16));
  AlignedBuffer back = ZeroBuffer(kLength);
  ASSERT_TRUE((*store)->Read("g", back.data(), kLength).ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kLength), 0);
  EXPECT_GT((*engine)->stats().short_transfers, 0u);
  ASSERT_TRUE((*store)->Close().ok());
}

TEST_P(SwapStoreTest, FileOfTheOldFormatVersionIsAClearError) {
  const SwapStoreOptions options = StoreOptions();
  std::string path;
  {
    auto store = Create(options);
    path = store->file_paths().front();
  }
  // Version 1 in both header slots (the version is checked before the header checksum).
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint32_t v1 = 1;
  for (uint64_t slot : {uint64_t{0}, SwapSlotBytes(options.max_extents)}) {
    ASSERT_EQ(pwrite(fd, &v1, sizeof(v1), static_cast<off_t>(slot + 8)), 4);
  }
  close(fd);
  Status status = SwapStore::Open(*engine_, options).status();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("field 'version' is 1"));
  EXPECT_THAT(status.message(), HasSubstr("swap format version 2"));
}

TEST_P(SwapStoreTest, ChecksumChunkSizeMustBeAPowerOfTwo) {
  for (uint64_t bad : {uint64_t{0}, uint64_t{2048}, uint64_t{3} << 20, uint64_t{2} << 30}) {
    SwapStoreOptions options = StoreOptions();
    options.checksum_chunk_bytes = bad;
    Status status = SwapStore::Create(*engine_, options).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("checksum_chunk_bytes"));
  }
}

TEST_P(SwapStoreTest, ChecksumsCanBeTurnedOff) {
  SwapStoreOptions options = StoreOptions();
  options.verify_checksums = false;
  auto store = Create(options);
  const AlignedBuffer source = PatternBuffer(100000, 51);
  ASSERT_TRUE(store->Allocate("x", 100000).ok());
  ASSERT_TRUE(store->Write("x", source.data(), 100000).ok());
  EXPECT_FALSE(store->Find("x")->checksummed);
  FlipByte(*store, *store->Find("x"), 5, options);
  AlignedBuffer back = ZeroBuffer(100000);
  ASSERT_TRUE(store->Read("x", back.data(), 100000).ok());
  EXPECT_EQ(static_cast<unsigned char>(back.as<char>()[5]),
            static_cast<unsigned char>(source.as<char>()[5] ^ 0x20));
}

TEST_P(SwapStoreTest, RangeAndStateErrorsNameTheExtent) {
  auto store = Create(StoreOptions());
  const AlignedBuffer source = PatternBuffer(1 << 20, 61);
  AlignedBuffer back = ZeroBuffer(1 << 20);
  ASSERT_TRUE(store->Allocate("p", 10000).ok());
  Status status = store->Read("p", back.data(), 10000);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("'p' holds no data"));
  ASSERT_TRUE(store->Write("p", source.data(), 10000).ok());
  status = store->Read("p", back.data(), 10001);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), HasSubstr("past its end"));
  EXPECT_THAT(status.message(), HasSubstr("'p'"));
  status = store->Read("p", back.data(), 4096);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  status = store->Write("p", source.data(), 12289);  // capacity is 12288
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), HasSubstr("capacity of 12288"));
  EXPECT_EQ(store->Read("missing", back.data(), 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Allocate("p", 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Allocate(std::string(200, 'n'), 10).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(SwapStoreTest, FreedSpaceIsReusedAndTheStoreGrowsWhenFull) {
  SwapStoreOptions options = StoreOptions(2);
  options.capacity_bytes = 1 << 20;
  options.growth_bytes = 2 << 20;
  auto store = Create(options);
  EXPECT_EQ(store->capacity(), 1u << 20);
  auto a = store->Allocate("a", 600 << 10);
  auto b = store->Allocate("b", 300 << 10);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(store->Free("a").ok());
  auto c = store->Allocate("c", 500 << 10);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->offset, a->offset);
  auto d = store->Allocate("d", 1 << 20);  // does not fit: the files grow
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(store->capacity(), 3u << 20);
  const AlignedBuffer source = PatternBuffer(1 << 20, 71);
  ASSERT_TRUE(store->Write("d", source.data(), 1 << 20).ok());
  AlignedBuffer back = ZeroBuffer(1 << 20);
  ASSERT_TRUE(store->Read("d", back.data(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), 1 << 20), 0);
  EXPECT_EQ(store->Free("a").code(), StatusCode::kNotFound);
}

TEST_P(SwapStoreTest, ExtentTableLimitIsEnforced) {
  SwapStoreOptions options = StoreOptions();
  options.max_extents = 3;
  auto store = Create(options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->Allocate("e" + std::to_string(i), 4096).ok());
  Status status = store->Allocate("e3", 4096).status();
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("max_extents"));
}

TEST_P(SwapStoreTest, TruncatedSwapFileIsReportedNotRead) {
  const SwapStoreOptions options = StoreOptions();
  constexpr uint64_t kLength = 3 << 20;
  const AlignedBuffer source = PatternBuffer(kLength, 81);
  auto store = Create(options);
  ASSERT_TRUE(store->Allocate("big", kLength).ok());
  ASSERT_TRUE(store->Write("big", source.data(), kLength).ok());
  const SwapExtent extent = *store->Find("big");
  const std::string path = store->file_paths()[0];
  // Someone truncates the swap file under the running store (DeepSpeed #1070's symptom).
  const uint64_t cut =
      SwapDataOffset(SwapSlotBytes(options.max_extents)) + extent.offset + (1 << 20);
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(cut)), 0);
  AlignedBuffer back = ZeroBuffer(kLength);
  Status status = store->Read("big", back.data(), kLength);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("'big'"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("read past the end"));
  ASSERT_TRUE(store->Close().ok());
  // Reopening notices the file is shorter than its header says.
  status = SwapStore::Open(*engine_, options).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, SwapStoreTest, ::testing::ValuesIn(AllIoPaths()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sluice::offload
