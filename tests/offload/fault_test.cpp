// Faults: a full filesystem or file-size limit, the fallback when io_uring is blocked, and a
// filesystem without O_DIRECT. Each runs on every I/O path where that makes sense.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>

#include "offload/aio_engine.h"
#include "offload/io_probe.h"
#include "offload/swap_store.h"
#include "tests/offload/test_support.h"

namespace sluice::offload {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using testutil::AllIoPaths;
using testutil::IoPath;
using testutil::OptionsFor;
using testutil::PatternBuffer;
using testutil::ScopedFileSizeLimit;
using testutil::ScopedMount;
using testutil::TempDir;
using testutil::ZeroBuffer;

class FaultTest : public ::testing::TestWithParam<IoPath> {
 protected:
  void SetUp() override {
    const std::string reason = testutil::SkipReason(GetParam(), dir_.path());
    if (!reason.empty()) GTEST_SKIP() << reason;
    auto engine = AioEngine::Create(OptionsFor(GetParam()));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }

  TempDir dir_;
  std::unique_ptr<AioEngine> engine_;
};

TEST_P(FaultTest, WritePastTheFileSizeLimitFailsWithEfbigAndEarlierDataSurvives) {
  const std::string path = dir_.File("limited");
  AioFileOptions file_options;
  file_options.paths = {path};
  const AioFileId file = *engine_->Open(file_options);
  constexpr uint64_t kLimit = 3 << 20;
  const AlignedBuffer source = PatternBuffer(4 << 20, 1);
  Status status;
  {
    ScopedFileSizeLimit limit(kLimit);
    ASSERT_TRUE(engine_->Write(file, 0, source.data(), 2 << 20).Wait().ok());
    status = engine_->Write(file, 2 << 20, source.as<char>() + (2 << 20), 2 << 20).Wait();
  }
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("(EFBIG)"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("offset 3145728"));  // where the limit cut it
  // What was written before the failed request survives. The failed request's own bytes are
  // undefined: once one of its chunks fails, chunks not yet started are skipped (both backends),
  // so its piece below the limit may or may not have landed.
  AlignedBuffer back = ZeroBuffer(2 << 20);
  const Status read = engine_->Read(file, 0, back.data(), 2 << 20).Wait();
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(std::memcmp(back.data(), source.data(), 2 << 20), 0);
}

TEST_P(FaultTest, StoreThatCannotGrowFailsCleanlyAndKeepsEarlierExtents) {
  SwapStoreOptions options;
  options.paths = {dir_.Subdir("a"), dir_.Subdir("b")};
  options.capacity_bytes = 2 << 20;
  options.growth_bytes = 8 << 20;
  options.stripe_size = 256 << 10;
  options.max_extents = 16;
  auto created = SwapStore::Create(*engine_, options);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  SwapStore& store = **created;
  const AlignedBuffer first = PatternBuffer(1 << 20, 2);
  const AlignedBuffer second = PatternBuffer(900 << 10, 3);
  ASSERT_TRUE(store.Allocate("first", 1 << 20).ok());
  ASSERT_TRUE(store.Allocate("second", 900 << 10).ok());
  ASSERT_TRUE(store.Write("first", first.data(), 1 << 20).ok());
  ASSERT_TRUE(store.Write("second", second.data(), 900 << 10).ok());
  const uint64_t capacity = store.capacity();
  const uint64_t generation = store.generation();
  Status status;
  {
    // Each stripe file may not pass its current size: growing has to fail.
    ScopedFileSizeLimit limit(std::filesystem::file_size(store.file_paths()[0]));
    status = store.Allocate("third", 4 << 20).status();
  }
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("(EFBIG)"));
  EXPECT_THAT(status.message(), HasSubstr("sluice_swap.rank0.swp"));
  EXPECT_THAT(status.message(), HasSubstr("'third'"));
  EXPECT_EQ(store.capacity(), capacity);
  EXPECT_EQ(store.generation(), generation);
  EXPECT_FALSE(store.Find("third").ok());
  AlignedBuffer back = ZeroBuffer(1 << 20);
  ASSERT_TRUE(store.Read("first", back.data(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(back.data(), first.data(), 1 << 20), 0);
  ASSERT_TRUE(store.Read("second", back.data(), 900 << 10).ok());
  EXPECT_EQ(std::memcmp(back.data(), second.data(), 900 << 10), 0);
  // With the limit gone the same allocation succeeds, and the store reopens verified.
  ASSERT_TRUE(store.Allocate("third", 4 << 20).ok());
  ASSERT_TRUE(store.Close().ok());
  auto reopened = SwapStore::Open(*engine_, options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  ASSERT_TRUE((*reopened)->Read("first", back.data(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(back.data(), first.data(), 1 << 20), 0);
}

TEST_P(FaultTest, PreallocationBeyondTheLimitIsReportedAtCreation) {
  SwapStoreOptions options;
  options.paths = {dir_.path()};
  options.capacity_bytes = 64 << 20;
  Status status;
  {
    ScopedFileSizeLimit limit(16 << 20);
    status = SwapStore::Create(*engine_, options).status();
  }
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("preallocating swap file"));
  EXPECT_THAT(status.message(), HasSubstr("(EFBIG)"));
  EXPECT_THAT(status.message(), HasSubstr("ulimit -f"));
}

TEST_P(FaultTest, FullFilesystemFailsCleanlyAndEarlierExtentsStayVerified) {
  ScopedMount small("tmpfs", "size=12m");
  if (!small.ok()) GTEST_SKIP() << small.reason();
  SwapStoreOptions options;
  options.paths = {small.path()};
  options.capacity_bytes = 0;
  options.growth_bytes = 1 << 20;
  options.max_extents = 64;
  auto created = SwapStore::Create(*engine_, options);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  SwapStore& store = **created;
  std::vector<AlignedBuffer> written;
  Status status;
  for (int i = 0; i < 40 && status.ok(); ++i) {
    const std::string name = "t" + std::to_string(i);
    status = store.Allocate(name, 1 << 20).status();
    if (!status.ok()) break;
    written.push_back(PatternBuffer(1 << 20, 100 + i));
    ASSERT_TRUE(store.Write(name, written.back().data(), 1 << 20).ok());
  }
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("(ENOSPC)"));
  ASSERT_GE(written.size(), 4u);
  AlignedBuffer back = ZeroBuffer(1 << 20);
  for (size_t i = 0; i < written.size(); ++i) {
    ASSERT_TRUE(store.Read("t" + std::to_string(i), back.data(), 1 << 20).ok());
    EXPECT_EQ(std::memcmp(back.data(), written[i].data(), 1 << 20), 0);
  }
  // A file written without preallocation hits ENOSPC at write time, named with its offset.
  AioFileOptions loose;
  loose.paths = {small.path() + "/loose"};
  const AioFileId file = *engine_->Open(loose);
  const AlignedBuffer big = PatternBuffer(8 << 20, 7);
  status = engine_->Write(file, 0, big.data(), 8 << 20).Wait();
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("(ENOSPC)"));
  EXPECT_THAT(status.message(), HasSubstr("/loose"));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, FaultTest, ::testing::ValuesIn(AllIoPaths()),
                         [](const auto& info) { return info.param.name; });

// A filesystem without O_DIRECT (ramfs) is used buffered, with the same results.
TEST(FallbackTest, FilesystemWithoutODirectFallsBackToBufferedIo) {
  ScopedMount ramfs("ramfs", "");
  if (!ramfs.ok()) GTEST_SKIP() << ramfs.reason();
  EXPECT_EQ(ProbeODirect(ramfs.path()).code(), StatusCode::kUnavailable);
  auto engine = AioEngine::Create(AioOptions());
  ASSERT_TRUE(engine.ok());
  SwapStoreOptions options;
  options.paths = {ramfs.path()};
  options.capacity_bytes = 4 << 20;
  auto store = SwapStore::Create(**engine, options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const AlignedBuffer source = PatternBuffer(1 << 20, 9);
  ASSERT_TRUE((*store)->Allocate("x", 1 << 20).ok());
  ASSERT_TRUE((*store)->Write("x", source.data(), 1 << 20).ok());
  AlignedBuffer back = ZeroBuffer(1 << 20);
  ASSERT_TRUE((*store)->Read("x", back.data(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), 1 << 20), 0);
}

// Blocks io_uring_setup with a seccomp filter (as container runtimes do) in a child process:
// the probe reports it, and an `auto` engine runs on the thread pool instead.
// Returns the child's exit code: 0 on success, else which step failed.
int RoundTripWithIoUringBlocked() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    return 3;
  }
  Status probe = ProbeIoUring();
  if (probe.code() != StatusCode::kUnavailable ||
      probe.message().find("EPERM") == std::string::npos) {
    return 4;
  }
  if (AioEngine::Create({.backend = AioBackendKind::kIoUring}).ok()) return 5;
  auto engine = AioEngine::Create(AioOptions());
  if (!engine.ok() || (*engine)->backend_name() != "threadpool") return 6;
  TempDir dir;
  SwapStoreOptions options;
  options.paths = {dir.path()};
  options.capacity_bytes = 4 << 20;
  auto store = SwapStore::Create(**engine, options);
  if (!store.ok()) return 7;
  const AlignedBuffer source = PatternBuffer(1 << 20, 10);
  AlignedBuffer back = ZeroBuffer(1 << 20);
  if (!(*store)->Allocate("x", 1 << 20).ok() ||
      !(*store)->Write("x", source.data(), 1 << 20).ok() ||
      !(*store)->Read("x", back.data(), 1 << 20).ok() ||
      std::memcmp(back.data(), source.data(), 1 << 20) != 0) {
    return 8;
  }
  return 0;
}

// Scopes above have ended (the temporary directory is removed) before the child exits.
void RunWithIoUringBlocked() { _exit(RoundTripWithIoUringBlocked()); }

TEST(FallbackTest, BlockedIoUringFallsBackToTheThreadPool) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(RunWithIoUringBlocked(), ::testing::ExitedWithCode(0), "io_uring");
}

TEST(ProbeTest, ReportsThisMachinesCapabilities) {
  TempDir dir;
  struct statfs fs {};
  ASSERT_EQ(statfs(dir.path().c_str(), &fs), 0);
  Status direct = ProbeODirect(dir.path());
  if (fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC) {
    EXPECT_TRUE(direct.ok()) << direct.ToString();
  } else {
    EXPECT_TRUE(direct.ok() || direct.code() == StatusCode::kUnavailable) << direct.ToString();
  }
  EXPECT_EQ(ProbeODirect(dir.path() + "/missing").code(), StatusCode::kNotFound);
  // Leaves nothing behind.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  Status uring = ProbeIoUring();
  if (!uring.ok()) GTEST_SKIP() << "io_uring unavailable here: " << uring.ToString();
}

}  // namespace
}  // namespace sluice::offload
