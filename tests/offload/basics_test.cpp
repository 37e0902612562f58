// The small parts under the engine and the store: aligned buffers, checksums, the extent
// allocator and the header codec.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "offload/aligned_buffer.h"
#include "offload/checksum.h"
#include "offload/chunked_checksum.h"
#include "offload/extent_allocator.h"
#include "offload/host_shard_buffer.h"
#include "offload/swap_format.h"
#include "tests/offload/test_support.h"

namespace sluice::offload {
namespace {

using ::testing::HasSubstr;

TEST(AlignedBufferTest, IsAlignedZeroedAndRoundedUp) {
  for (uint64_t bytes : {1ull, 4096ull, 5000ull, (3ull << 20) + 1}) {
    auto buffer = AlignedBuffer::Allocate(bytes);
    ASSERT_TRUE(buffer.ok());
    EXPECT_TRUE(IsAligned(buffer->data()));
    EXPECT_EQ(buffer->size(), AlignUp(bytes, kIoAlignment));
    const auto* data = buffer->as<unsigned char>();
    for (uint64_t i = 0; i < buffer->size(); i += 511) ASSERT_EQ(data[i], 0);
  }
  // Large buffers start on a huge-page boundary so THP can back them.
  auto large = AlignedBuffer::Allocate(4 << 20);
  EXPECT_TRUE(IsAligned(large->data(), 2 << 20));
  EXPECT_EQ(AlignedBuffer::Allocate(0).status().code(), StatusCode::kInvalidArgument);
  AlignedBuffer moved = std::move(large).value();
  EXPECT_EQ(moved.size(), 4u << 20);
}

// Zero clears every byte, the tail of a last partial chunk included, on one thread or several.
TEST(HostShardBufferTest, ZeroClearsEveryByteOnAnyThreadCount) {
  const size_t bytes = (size_t{3} << 20) + 4100;  // three 1 MiB chunks and a ragged tail
  Result<HostShardBuffer> buffer =
      HostShardBuffer::Allocate(bytes, MemoryCategory::kGrads, "a test shard");
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  auto* data = buffer->data_as<uint8_t>();
  for (int threads : {1, 3, 0}) {
    std::memset(data, 0xA5, bytes);
    buffer->Zero(threads);
    EXPECT_EQ(std::count(data, data + bytes, 0), static_cast<std::ptrdiff_t>(bytes))
        << threads << " threads";
  }
}

TEST(ChecksumTest, StreamingEqualsOneShotAndSeesOneBitFlips) {
  std::vector<unsigned char> data(3 << 20);
  testutil::FillPattern(data.data(), data.size(), 3);
  const uint64_t whole = Checksum64(data.data(), data.size());
  StreamingChecksum stream;
  // Uneven pieces, as the store hashes them.
  const size_t pieces[] = {1, 4095, 1 << 20, 12345, 0};
  size_t at = 0;
  for (size_t piece : pieces) {
    stream.Update(data.data() + at, piece);
    at += piece;
  }
  stream.Update(data.data() + at, data.size() - at);
  EXPECT_EQ(stream.Digest(), whole);
  data[777777] ^= 1;
  EXPECT_NE(Checksum64(data.data(), data.size()), whole);
}

// Feeds [0, transfer) to `sum` as 4 KiB-multiple pieces, shuffled, from three threads that act
// as the engine's backend threads (ChunkFinished, then Work).
void FinishInRandomPieces(ChunkedChecksum& sum, const std::byte* base, uint64_t transfer,
                          uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (uint64_t at = 0; at < transfer;) {
    const uint64_t n = std::min(transfer - at, 4096 * (1 + random() % 40));
    pieces.emplace_back(at, n);
    at += n;
  }
  std::shuffle(pieces.begin(), pieces.end(), random);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < pieces.size(); i += 3) {
        sum.ChunkFinished(reinterpret_cast<const char*>(base + pieces[i].first), pieces[i].second,
                          true);
        sum.Work(pieces[i].second);
      }
    });
  }
  sum.HelpUntilFinished();  // the waiter hashes alongside the "backend" threads
  for (std::thread& thread : threads) thread.join();
}

TEST(ChunkedChecksumTest, PiecesInAnyOrderOnAnyThreadGiveTheOneThreadValue) {
  constexpr uint64_t kLength = (5 << 20) + 777;  // the last chunk is partial; padding follows
  const uint64_t transfer = AlignUp(kLength, kIoAlignment);
  std::vector<std::byte> data(transfer);
  testutil::FillPattern(data.data(), data.size(), 11);
  for (uint32_t shift : {12u, 16u, 20u, 23u}) {
    SCOPED_TRACE(testing::Message() << "chunk 2^" << shift);
    ChunkedChecksum sum(data.data(), kLength, transfer, shift);
    FinishInRandomPieces(sum, data.data(), transfer, shift);
    ASSERT_TRUE(sum.ok());
    EXPECT_EQ(sum.Digest(), ChunkedChecksum64(data.data(), kLength, shift));
    const uint64_t chunk = uint64_t{1} << shift;
    ASSERT_EQ(sum.chunk_sums().size(), (kLength + chunk - 1) / chunk);
    for (size_t k = 0; k < sum.chunk_sums().size(); ++k) {
      ASSERT_EQ(sum.chunk_sums()[k],
                Checksum64(data.data() + k * chunk, std::min(chunk, kLength - k * chunk)));
    }
  }
  // The padding is transferred but not covered; the chunk size is part of the value.
  const uint64_t reference = ChunkedChecksum64(data.data(), kLength, 20);
  data[kLength + 5] ^= std::byte{1};
  EXPECT_EQ(ChunkedChecksum64(data.data(), kLength, 20), reference);
  EXPECT_NE(ChunkedChecksum64(data.data(), kLength, 16), reference);
  data[3 << 20] ^= std::byte{1};
  EXPECT_NE(ChunkedChecksum64(data.data(), kLength, 20), reference);
}

// Hashing follows the I/O: a chunk is hashed from its bytes as they are once its piece has
// finished, never earlier (hashing ahead of a write races the device for memory bandwidth).
TEST(ChunkedChecksumTest, AChunkIsHashedOnlyOnceItsPieceHasFinished) {
  constexpr uint32_t kShift = 16;
  std::vector<std::byte> data(4 << kShift);
  testutil::FillPattern(data.data(), data.size(), 3);
  ChunkedChecksum sum(data.data(), data.size(), data.size(), kShift);
  std::thread waiter([&] { sum.HelpUntilFinished(); });
  // Time for a waiter that hashed ahead to do so; one that waits for the pieces idles.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  testutil::FillPattern(data.data(), data.size(), 4);
  const auto* base = reinterpret_cast<const char*>(data.data());
  for (uint64_t at = 0; at < data.size(); at += uint64_t{1} << kShift) {
    sum.ChunkFinished(base + at, uint64_t{1} << kShift, true);
  }
  waiter.join();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum.Digest(), ChunkedChecksum64(data.data(), data.size(), kShift));
}

TEST(ChunkedChecksumTest, FailedOrAbandonedRequestsEndTheWait) {
  std::vector<std::byte> data(1 << 20);
  {
    ChunkedChecksum sum(data.data(), data.size(), data.size(), 16);
    std::thread backend([&] {
      const auto* base = reinterpret_cast<const char*>(data.data());
      sum.ChunkFinished(base, 512 << 10, true);
      sum.ChunkFinished(base + (512 << 10), 512 << 10, false);
    });
    sum.HelpUntilFinished();
    backend.join();
    EXPECT_FALSE(sum.ok());
  }
  {
    ChunkedChecksum sum(data.data(), data.size(), data.size(), 16);
    sum.Abandon();
    sum.HelpUntilFinished();
    EXPECT_FALSE(sum.ok());
  }
  {
    ChunkedChecksum empty(data.data(), 0, 0, 20);
    empty.HelpUntilFinished();
    EXPECT_TRUE(empty.ok());
    EXPECT_EQ(empty.Digest(), ChunkedChecksum64(data.data(), 0, 20));
  }
}

TEST(ExtentAllocatorTest, FirstFitWithCoalescingAndReservation) {
  ExtentAllocator allocator(4096);
  allocator.AddSpace(0, 1 << 20);
  const uint64_t a = *allocator.Allocate(100);
  const uint64_t b = *allocator.Allocate(8192);
  const uint64_t c = *allocator.Allocate(4096);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 4096u);
  EXPECT_EQ(c, 12288u);
  allocator.Free(a, 4096);
  allocator.Free(b, 8192);  // coalesces with a's range
  EXPECT_EQ(*allocator.Allocate(12288), 0u);
  EXPECT_FALSE(allocator.Allocate(2 << 20).has_value());
  allocator.AddSpace(1 << 20, 1 << 20);  // growth joins the tail
  EXPECT_EQ(allocator.largest_free(), (2u << 20) - 16384);
  EXPECT_TRUE(allocator.Allocate((2 << 20) - 16384).has_value());
  EXPECT_EQ(allocator.free_bytes(), 0u);

  ExtentAllocator rebuilt(4096);
  rebuilt.AddSpace(0, 1 << 20);
  EXPECT_TRUE(rebuilt.Reserve(8192, 4096).ok());
  EXPECT_EQ(rebuilt.Reserve(8192, 4096).code(), StatusCode::kDataLoss);  // overlap
  EXPECT_EQ(rebuilt.Reserve((1 << 20) - 4096, 8192).code(), StatusCode::kDataLoss);
  EXPECT_EQ(*rebuilt.Allocate(8192), 0u);
  EXPECT_EQ(*rebuilt.Allocate(4096), 12288u);
}

SwapHeader SampleHeader() {
  SwapHeader header;
  header.generation = 7;
  header.store_id = 0x1234567890abcdefull;
  header.rank = 3;
  header.stripe_count = 2;
  header.stripe_index = 1;
  header.max_extents = 40;
  header.stripe_size = 1 << 20;
  header.slot_bytes = SwapSlotBytes(40);
  header.data_offset = SwapDataOffset(header.slot_bytes);
  header.capacity = 64 << 20;
  header.extents.push_back({"subgroup0.params", 0, 8192, 5000, 0xfeedull, 3, 20});
  header.extents.push_back({std::string(kSwapMaxNameBytes, 'n'), 8192, 4096, 4096, 1, 1, 0});
  return header;
}

TEST(SwapFormatTest, EncodeDecodeRoundTrip) {
  const SwapHeader header = SampleHeader();
  const std::vector<std::byte> bytes = EncodeSwapHeader(header);
  EXPECT_EQ(bytes.size() % 4096, 0u);
  EXPECT_EQ(std::memcmp(bytes.data(), "SLUICESW", 8), 0);
  auto decoded = DecodeSwapHeader(bytes, "sample");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->generation, 7u);
  EXPECT_EQ(decoded->store_id, header.store_id);
  EXPECT_EQ(decoded->rank, 3u);
  EXPECT_EQ(decoded->stripe_index, 1u);
  EXPECT_EQ(decoded->capacity, header.capacity);
  ASSERT_EQ(decoded->extents.size(), 2u);
  EXPECT_EQ(decoded->extents[0].name, "subgroup0.params");
  EXPECT_EQ(decoded->extents[0].checksum, 0xfeedu);
  EXPECT_EQ(decoded->extents[0].checksum_chunk_shift, 20u);
  EXPECT_EQ(decoded->extents[1].checksum_chunk_shift, 0u);
  EXPECT_EQ(decoded->extents[1].name, header.extents[1].name);
  // 4094 records fill two 512 KiB slots exactly; one more spills into the next MiB.
  EXPECT_EQ(SwapDataOffset(SwapSlotBytes(4094)), 1u << 20);
  EXPECT_EQ(SwapDataOffset(SwapSlotBytes(4095)), 2u << 20);
}

TEST(SwapFormatTest, DecodingNamesTheBadField) {
  const std::vector<std::byte> good = EncodeSwapHeader(SampleHeader());
  auto broken = [&](size_t at, std::byte value) {
    std::vector<std::byte> bytes = good;
    bytes[at] = value;
    return DecodeSwapHeader(bytes, "slot").status();
  };
  EXPECT_THAT(broken(0, std::byte{'X'}).message(), HasSubstr("'magic'"));
  EXPECT_THAT(broken(8, std::byte{9}).message(), HasSubstr("'version'"));
  EXPECT_THAT(broken(100, std::byte{1}).message(), HasSubstr("'header_checksum'"));
  // A flipped bit inside an extent record is caught by the header checksum too.
  EXPECT_THAT(broken(256 + 100, std::byte{0x55}).message(), HasSubstr("'header_checksum'"));
  EXPECT_THAT(broken(84, std::byte{100}).message(), HasSubstr("'extent_count'"));
  EXPECT_EQ(broken(0, std::byte{'X'}).code(), StatusCode::kDataLoss);
  // A file of format version 1 is not damaged but unreadable here: both versions are named.
  const Status old = broken(8, std::byte{1});
  EXPECT_EQ(old.code(), StatusCode::kFailedPrecondition) << old.ToString();
  EXPECT_THAT(old.message(), HasSubstr("slot: field 'version' is 1"));
  EXPECT_THAT(old.message(), HasSubstr("reads swap format version 2 only"));
  EXPECT_THAT(old.message(), HasSubstr("an older Sluice"));
}

}  // namespace
}  // namespace sluice::offload
