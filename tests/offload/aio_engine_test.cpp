// The I/O engine, run on every path: io_uring and the thread pool, each with O_DIRECT and with
// buffered I/O.
#include "offload/aio_engine.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/aligned_buffer.h"
#include "tests/offload/test_support.h"

namespace sluice::offload {
namespace {

using ::testing::HasSubstr;
using testutil::AllIoPaths;
using testutil::IoPath;
using testutil::OptionsFor;
using testutil::PatternBuffer;
using testutil::TempDir;
using testutil::ZeroBuffer;

class AioEngineTest : public ::testing::TestWithParam<IoPath> {
 protected:
  void SetUp() override {
    const std::string reason = testutil::SkipReason(GetParam(), dir_.path());
    if (!reason.empty()) GTEST_SKIP() << reason;
  }

  AioOptions Options() const { return OptionsFor(GetParam()); }

  std::unique_ptr<AioEngine> MakeEngine(const AioOptions& options) {
    auto engine = AioEngine::Create(options);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return std::move(engine).value();
  }

  AioFileId OpenFile(AioEngine& engine, const std::vector<std::string>& paths, uint64_t preallocate,
                     uint64_t stripe = 1 << 20) {
    AioFileOptions options;
    options.paths = paths;
    options.stripe_size = stripe;
    options.preallocate_bytes = preallocate;
    auto file = engine.Open(options);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    return *file;
  }

  TempDir dir_;
};

TEST_P(AioEngineTest, UsesTheRequestedBackendAndIoMode) {
  auto engine = MakeEngine(Options());
  EXPECT_EQ(engine->backend_name(), AioBackendName(GetParam().backend));
  const AioFileId file = OpenFile(*engine, {dir_.File("f")}, 1 << 20);
  EXPECT_EQ(*engine->IsDirect(file), GetParam().direct_io);
}

TEST_P(AioEngineTest, RoundTripsAtOddBlockSizesAndQueueDepths) {
  constexpr uint64_t kBytes = (3 << 20) + 8192;
  const AlignedBuffer source = PatternBuffer(kBytes, 1);
  for (uint64_t block : {4096ull, 12288ull, 69632ull, (1ull << 20) + 4096}) {
    for (int depth : {1, 2, 7, 32, 64}) {
      SCOPED_TRACE(testing::Message() << "block " << block << " depth " << depth);
      AioOptions options = Options();
      options.block_size = block;
      options.queue_depth = depth;
      auto engine = MakeEngine(options);
      const AioFileId file = OpenFile(*engine, {dir_.File("odd")}, kBytes + 8192);
      ASSERT_TRUE(engine->Write(file, 8192, source.data(), kBytes).Wait().ok());
      AlignedBuffer back = ZeroBuffer(kBytes);
      ASSERT_TRUE(engine->Read(file, 8192, back.data(), kBytes).Wait().ok());
      ASSERT_EQ(std::memcmp(back.data(), source.data(), kBytes), 0);
      EXPECT_GE(engine->stats().chunks, 2 * ((kBytes + block - 1) / block));
    }
  }
}

TEST_P(AioEngineTest, SeveralRingsShareOneRequest) {
  AioOptions options = Options();
  options.intra_op_parallelism = 3;
  options.block_size = 64 << 10;
  auto engine = MakeEngine(options);
  constexpr uint64_t kBytes = 5 << 20;
  const AioFileId file = OpenFile(*engine, {dir_.File("rings")}, kBytes);
  const AlignedBuffer source = PatternBuffer(kBytes, 2);
  ASSERT_TRUE(engine->Write(file, 0, source.data(), kBytes).Wait().ok());
  AlignedBuffer back = ZeroBuffer(kBytes);
  ASSERT_TRUE(engine->Read(file, 0, back.data(), kBytes).Wait().ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kBytes), 0);
}

// Stripe s of the logical space lives in part s % n at offset base + (s / n) * stripe.
TEST_P(AioEngineTest, StripesRoundRobinOverDirectories) {
  for (int parts : {2, 3}) {
    SCOPED_TRACE(testing::Message() << parts << " directories");
    constexpr uint64_t kStripe = 64 << 10;
    constexpr uint64_t kBase = 8192;
    constexpr uint64_t kBytes = 17 * kStripe;
    std::vector<std::string> paths;
    for (int p = 0; p < parts; ++p) {
      paths.push_back(dir_.Subdir(fmt::format("d{}{}", parts, p)) + "/s");
    }
    AioOptions options = Options();
    options.block_size = 48 << 10;  // not a divisor of the stripe: chunks split at both edges
    auto engine = MakeEngine(options);
    AioFileOptions file_options;
    file_options.paths = paths;
    file_options.stripe_size = kStripe;
    file_options.base_offset = kBase;
    file_options.preallocate_bytes = kBytes;
    const AioFileId file = *engine->Open(file_options);
    const AlignedBuffer source = PatternBuffer(kBytes, 3);
    // Start mid-stripe so the first and last pieces are partial stripes.
    constexpr uint64_t kStart = 3 * 4096;
    ASSERT_TRUE(engine->Write(file, kStart, source.data(), kBytes - kStart).Wait().ok());
    AlignedBuffer back = ZeroBuffer(kBytes);
    ASSERT_TRUE(engine->Read(file, kStart, back.data(), kBytes - kStart).Wait().ok());
    ASSERT_EQ(std::memcmp(back.data(), source.data(), kBytes - kStart), 0);
    ASSERT_TRUE(engine->Sync(file).ok());
    // The physical layout, read behind the engine's back.
    std::vector<char> physical(4096);
    for (uint64_t logical = kStart; logical < kBytes; logical += 4096) {
      const uint64_t stripe = logical / kStripe;
      const std::string& part = paths[stripe % parts];
      const uint64_t offset = kBase + (stripe / parts) * kStripe + logical % kStripe;
      const int fd = open(part.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(pread(fd, physical.data(), 4096, static_cast<off_t>(offset)), 4096);
      close(fd);
      ASSERT_EQ(std::memcmp(physical.data(), source.as<char>() + (logical - kStart), 4096), 0)
          << "logical offset " << logical;
    }
  }
}

TEST_P(AioEngineTest, BatchOfRequestsCompletesAsOneHandle) {
  auto engine = MakeEngine(Options());
  constexpr uint64_t kPiece = 40960;
  constexpr int kCount = 32;
  const AioFileId file = OpenFile(*engine, {dir_.File("batch")}, kPiece * kCount * 2);
  const AlignedBuffer source = PatternBuffer(kPiece * kCount, 4);
  std::vector<IoRequest> writes;
  for (int i = 0; i < kCount; ++i) {
    // Interleaved: request i goes to slot (i * 7) % kCount of the file.
    writes.push_back({IoOp::kWrite, file, ((i * 7) % kCount) * kPiece * 2,
                      source.as<char>() + i * kPiece, kPiece, nullptr});
  }
  AioHandle handle = engine->Submit(writes);
  EXPECT_EQ(handle.bytes(), kPiece * kCount);
  ASSERT_TRUE(handle.Wait().ok());
  AlignedBuffer back = ZeroBuffer(kPiece * kCount);
  std::vector<IoRequest> reads = writes;
  for (int i = 0; i < kCount; ++i) {
    reads[i].op = IoOp::kRead;
    reads[i].buffer = back.as<char>() + i * kPiece;
  }
  ASSERT_TRUE(engine->Submit(reads).Wait().ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kPiece * kCount), 0);
}

TEST_P(AioEngineTest, ShortTransfersAreResubmittedForTheRemainder) {
  AioOptions options = Options();
  options.block_size = 256 << 10;
  options.debug_short_io_bytes = 12288;  // every completion "moves" at most 12 KiB
  auto engine = MakeEngine(options);
  constexpr uint64_t kBytes = (1 << 20) + 4096;
  const AioFileId file = OpenFile(*engine, {dir_.File("short")}, kBytes);
  const AlignedBuffer source = PatternBuffer(kBytes, 5);
  ASSERT_TRUE(engine->Write(file, 0, source.data(), kBytes).Wait().ok());
  AlignedBuffer back = ZeroBuffer(kBytes);
  ASSERT_TRUE(engine->Read(file, 0, back.data(), kBytes).Wait().ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kBytes), 0);
  // 256 KiB chunks in 12 KiB steps: 21 completions per chunk, 20 of them short.
  EXPECT_GE(engine->stats().short_transfers, 2 * 4 * 20u);
}

// Records what a request's observer was told, piece by piece.
class RecordingObserver final : public ChunkObserver {
 public:
  explicit RecordingObserver(const char* base) : base_(base) {}
  void ChunkFinished(const char* data, uint64_t bytes, bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    pieces_.push_back({static_cast<uint64_t>(data - base_), bytes, ok});
  }
  struct Piece {
    uint64_t offset, bytes;
    bool ok;
  };
  // Sorted by offset.
  std::vector<Piece> Pieces() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Piece> sorted = pieces_;
    std::sort(sorted.begin(), sorted.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    return sorted;
  }

 private:
  const char* base_;
  std::mutex mu_;
  std::vector<Piece> pieces_;
};

TEST_P(AioEngineTest, ObserverHearsOfEveryPieceOnceBeforeTheHandleCompletes) {
  AioOptions options = Options();
  options.block_size = 256 << 10;
  options.intra_op_parallelism = 2;
  options.debug_short_io_bytes = 100 << 10;  // resubmitted remainders count once, when done
  auto engine = MakeEngine(options);
  // Striped at 192 KiB: pieces are cut at block and stripe boundaries, not at multiples of each.
  constexpr uint64_t kBytes = (2 << 20) + 12288;
  const AioFileId file = OpenFile(*engine, {dir_.File("o0"), dir_.File("o1")}, 4 << 20, 196608);
  AlignedBuffer buffer = PatternBuffer(kBytes, 8);
  for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
    auto observer = std::make_shared<RecordingObserver>(buffer.as<char>());
    const IoRequest request{op, file, 4096, buffer.data(), kBytes, observer};
    ASSERT_TRUE(engine->Submit({&request, 1}).Wait().ok());
    // Called before completion: nothing may arrive after Wait() returned.
    const auto pieces = observer->Pieces();
    uint64_t next = 0;
    for (const auto& piece : pieces) {
      EXPECT_EQ(piece.offset, next);
      EXPECT_TRUE(piece.ok);
      EXPECT_LE(piece.bytes, 256u << 10);
      next = piece.offset + piece.bytes;
    }
    EXPECT_EQ(next, kBytes);
    EXPECT_GT(pieces.size(), kBytes / (256 << 10));
  }
}

TEST_P(AioEngineTest, ObserverHearsOfFailedPieces) {
  auto engine = MakeEngine(Options());
  const AioFileId file = OpenFile(*engine, {dir_.File("ofail")}, 1 << 20);
  AlignedBuffer back = ZeroBuffer(2 << 20);
  auto observer = std::make_shared<RecordingObserver>(back.as<char>());
  // The second MiB lies past the end of the file.
  const IoRequest request{IoOp::kRead, file, 0, back.data(), 2 << 20, observer};
  EXPECT_EQ(engine->Submit({&request, 1}).Wait().code(), StatusCode::kOutOfRange);
  uint64_t total = 0;
  bool any_failed = false;
  for (const auto& piece : observer->Pieces()) {
    total += piece.bytes;
    any_failed = any_failed || !piece.ok;
  }
  EXPECT_EQ(total, 2u << 20);  // every piece reported, done or not
  EXPECT_TRUE(any_failed);
}

TEST_P(AioEngineTest, ReadPastEndOfFileIsOutOfRangeNamingFileAndOffset) {
  auto engine = MakeEngine(Options());
  const AioFileId file = OpenFile(*engine, {dir_.File("eof")}, 1 << 20);
  AlignedBuffer back = ZeroBuffer(2 << 20);
  Status status = engine->Read(file, 512 << 10, back.data(), 1 << 20).Wait();
  ASSERT_EQ(status.code(), StatusCode::kOutOfRange) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr(dir_.File("eof")));
  EXPECT_THAT(status.message(), HasSubstr("offset 1048576"));
  EXPECT_THAT(status.message(), HasSubstr("read past the end"));
}

TEST_P(AioEngineTest, ShortReadAtEndOfFileIsResubmittedThenReported) {
  AioOptions options = Options();
  options.block_size = 64 << 10;
  auto engine = MakeEngine(options);
  // The file ends 16 KiB into the last chunk: the kernel returns a short read there.
  const AioFileId file = OpenFile(*engine, {dir_.File("tail")}, (128 << 10) + 16384);
  AlignedBuffer back = ZeroBuffer(192 << 10);
  Status status = engine->Read(file, 0, back.data(), 192 << 10).Wait();
  ASSERT_EQ(status.code(), StatusCode::kOutOfRange) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("offset 147456"));
  EXPECT_GE(engine->stats().short_transfers, 1u);
}

TEST_P(AioEngineTest, KernelErrorsNameFileOffsetLengthAndErrno) {
  auto engine = MakeEngine(Options());
  const std::string path = dir_.File("ro");
  { OpenFile(*engine, {path}, 1 << 20); }
  AioFileOptions read_only;
  read_only.paths = {path};
  read_only.read_only = true;
  const AioFileId file = *engine->Open(read_only);
  const AlignedBuffer source = PatternBuffer(1 << 20, 6);
  // Writing through a read-only descriptor: the kernel answers EBADF.
  Status status = engine->Write(file, 65536, source.data(), 131072).Wait();
  ASSERT_EQ(status.code(), StatusCode::kIoError) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("offset 65536"));
  EXPECT_THAT(status.message(), HasSubstr("write of 131072 bytes"));
  EXPECT_THAT(status.message(), HasSubstr("(EBADF)"));
}

TEST_P(AioEngineTest, AlignmentIsCheckedOnlyForDirectIo) {
  auto engine = MakeEngine(Options());
  const AioFileId file = OpenFile(*engine, {dir_.File("align")}, 1 << 20);
  AlignedBuffer buffer = PatternBuffer(1 << 20, 7);
  char* base = buffer.as<char>();
  struct Case {
    void* data;
    uint64_t offset;
    uint64_t length;
    const char* names;
  };
  const Case cases[] = {{base + 8, 0, 4096, "buffer address"},
                        {base, 100, 4096, "offset 100"},
                        {base, 4096, 1000, "length 1000"}};
  for (const Case& c : cases) {
    Status status = engine->Write(file, c.offset, c.data, c.length).Wait();
    if (GetParam().direct_io) {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
      EXPECT_THAT(status.message(), HasSubstr(c.names));
      EXPECT_THAT(status.message(), HasSubstr("O_DIRECT"));
    } else {
      // Buffered I/O takes any alignment; the bytes must land where asked.
      ASSERT_TRUE(status.ok()) << status.ToString();
      std::vector<char> back(c.length);
      ASSERT_TRUE(engine->Read(file, c.offset, back.data(), c.length).Wait().ok());
      EXPECT_EQ(std::memcmp(back.data(), c.data, c.length), 0);
    }
  }
}

TEST_P(AioEngineTest, UnknownAndClosedFilesAreNotFound) {
  auto engine = MakeEngine(Options());
  AlignedBuffer buffer = ZeroBuffer(4096);
  EXPECT_EQ(engine->Read(12345, 0, buffer.data(), 4096).Wait().code(), StatusCode::kNotFound);
  const AioFileId file = OpenFile(*engine, {dir_.File("closed")}, 4096);
  ASSERT_TRUE(engine->Close(file).ok());
  EXPECT_EQ(engine->Read(file, 0, buffer.data(), 4096).Wait().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->Close(file).code(), StatusCode::kNotFound);
}

TEST_P(AioEngineTest, PollTurnsTrueWhenWaitWouldNotBlock) {
  auto engine = MakeEngine(Options());
  constexpr uint64_t kBytes = 8 << 20;
  const AioFileId file = OpenFile(*engine, {dir_.File("poll")}, kBytes);
  const AlignedBuffer source = PatternBuffer(kBytes, 8);
  AioHandle handle = engine->Write(file, 0, source.data(), kBytes);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!handle.Poll() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(handle.Poll());
  EXPECT_TRUE(handle.Wait().ok());
  EXPECT_TRUE(AioHandle().Poll());
  EXPECT_TRUE(AioHandle().Wait().ok());
}

TEST_P(AioEngineTest, DestroyingTheEngineFinishesRequestsInFlight) {
  constexpr uint64_t kBytes = 16 << 20;
  const AlignedBuffer source = PatternBuffer(kBytes, 9);
  AioHandle handle;
  {
    auto engine = MakeEngine(Options());
    const AioFileId file = OpenFile(*engine, {dir_.File("inflight")}, kBytes);
    handle = engine->Write(file, 0, source.data(), kBytes);
  }
  ASSERT_TRUE(handle.Poll());
  ASSERT_TRUE(handle.Wait().ok());
  auto engine = MakeEngine(Options());
  const AioFileId file = OpenFile(*engine, {dir_.File("inflight")}, 0);
  AlignedBuffer back = ZeroBuffer(kBytes);
  ASSERT_TRUE(engine->Read(file, 0, back.data(), kBytes).Wait().ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kBytes), 0);
}

TEST_P(AioEngineTest, CloseWaitsForTheFilesRequests) {
  auto engine = MakeEngine(Options());
  constexpr uint64_t kBytes = 16 << 20;
  const AioFileId file = OpenFile(*engine, {dir_.File("close")}, kBytes);
  const AlignedBuffer source = PatternBuffer(kBytes, 10);
  AioHandle handle = engine->Write(file, 0, source.data(), kBytes);
  ASSERT_TRUE(engine->Close(file).ok());
  EXPECT_TRUE(handle.Poll());
  EXPECT_TRUE(handle.Wait().ok());
}

TEST_P(AioEngineTest, IdleEngineUsesNoCpu) {
  AioOptions options = Options();
  options.intra_op_parallelism = 2;
  auto engine = MakeEngine(options);
  const AioFileId file = OpenFile(*engine, {dir_.File("idle")}, 1 << 20);
  const AlignedBuffer source = PatternBuffer(1 << 20, 11);
  ASSERT_TRUE(engine->Write(file, 0, source.data(), 1 << 20).Wait().ok());
  const double before = testutil::ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double used = testutil::ProcessCpuSeconds() - before;
  EXPECT_LT(used, 0.02) << "completion threads must sleep, not poll";
}

TEST_P(AioEngineTest, RegisteredBuffersAreUsedWhereTheBackendHasThem) {
  auto engine = MakeEngine(Options());
  constexpr uint64_t kBytes = 4 << 20;
  const AioFileId file = OpenFile(*engine, {dir_.File("fixed")}, kBytes);
  AlignedBuffer source = PatternBuffer(kBytes, 12);
  AlignedBuffer back = ZeroBuffer(kBytes);
  const bool registered =
      engine->RegisterBuffer(source.data(), kBytes) && engine->RegisterBuffer(back.data(), kBytes);
  EXPECT_EQ(registered, GetParam().backend == AioBackendKind::kIoUring);
  ASSERT_TRUE(engine->Write(file, 0, source.data(), kBytes).Wait().ok());
  ASSERT_TRUE(engine->Read(file, 0, back.data(), kBytes).Wait().ok());
  EXPECT_EQ(std::memcmp(back.data(), source.data(), kBytes), 0);
  if (registered) {
    EXPECT_EQ(engine->stats().fixed_buffer_chunks, engine->stats().chunks);
  }
  engine->UnregisterBuffer(source.data());
  engine->UnregisterBuffer(back.data());
  // Unregistered memory still works, without fixed buffers.
  const uint64_t fixed = engine->stats().fixed_buffer_chunks;
  ASSERT_TRUE(engine->Read(file, 0, back.data(), kBytes).Wait().ok());
  EXPECT_EQ(engine->stats().fixed_buffer_chunks, fixed);
}

INSTANTIATE_TEST_SUITE_P(AllPaths, AioEngineTest, ::testing::ValuesIn(AllIoPaths()),
                         [](const auto& info) { return info.param.name; });

TEST(AioOptionsTest, InvalidSettingsNameTheConfigKey) {
  AioOptions options;
  options.block_size = 1000;
  Status status = AioEngine::Create(options).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("aio.block_size"));
  options = AioOptions();
  options.queue_depth = 0;
  EXPECT_THAT(AioEngine::Create(options).status().message(), HasSubstr("aio.queue_depth"));
  options = AioOptions();
  options.intra_op_parallelism = 0;
  EXPECT_THAT(AioEngine::Create(options).status().message(), HasSubstr("aio.intra_op_parallelism"));
  EXPECT_EQ(ParseAioBackend("io_uring").value(), AioBackendKind::kIoUring);
  EXPECT_FALSE(ParseAioBackend("libaio").ok());
}

}  // namespace
}  // namespace sluice::offload
