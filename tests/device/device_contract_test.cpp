// The Device contract (runtime/device.h), run on every backend. Device memory is only touched
// through copies and memsets here so that the same tests hold on a GPU.
#include "tests/device/device_contract_test.h"

#include <gmock/gmock.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/device/device_factory.h"
#include "runtime/memory_accounting.h"
#include "tests/device/device_test_util.h"

namespace sluice {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing_util::kMiB;

void DeviceContractTest::SetUp() {
  if (GetParam() == DeviceKind::kCuda && CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA GPU present";
  }
  Result<std::unique_ptr<Device>> device = CreateDevice({GetParam(), 0, kMemoryLimit});
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  device_ = std::move(device).value();
}

std::string DeviceKindParamName(const ::testing::TestParamInfo<DeviceKind>& info) {
  return std::string(DeviceKindName(info.param));
}

namespace {

// Word i of pattern `seed`: different for every seed and position.
uint32_t PatternWord(uint32_t seed, size_t i) {
  return seed * 0x9E3779B1u + static_cast<uint32_t>(i) * 2654435761u + 1;
}

void FillPattern(void* data, size_t bytes, uint32_t seed) {
  auto* bytes_out = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    bytes_out[i] = static_cast<uint8_t>(PatternWord(seed, i / 4) >> (8 * (i % 4)));
  }
}

// The first mismatching offset, or -1.
int64_t FirstMismatch(const void* data, size_t bytes, uint32_t seed) {
  std::vector<uint8_t> expected(bytes);
  FillPattern(expected.data(), bytes, seed);
  const auto* actual = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    if (actual[i] != expected[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

uint64_t DeltaCurrent(const MemorySnapshot& after, const MemorySnapshot& before, MemoryTier tier,
                      MemoryCategory category) {
  return after.at(tier, category).current - before.at(tier, category).current;
}

}  // namespace

TEST_P(DeviceContractTest, ReportsIdentityAndCapacity) {
  EXPECT_EQ(device_->kind(), GetParam());
  EXPECT_EQ(device_->index(), 0);
  EXPECT_EQ(device_->name(), std::string(DeviceKindName(GetParam())) + ":0");
  const DeviceMemoryInfo info = device_->MemoryInfo();
  EXPECT_EQ(info.capacity, kMemoryLimit);
  EXPECT_EQ(info.used, 0u);
  EXPECT_EQ(info.free, kMemoryLimit);
  EXPECT_EQ(info.largest_free_block, kMemoryLimit);
}

TEST_P(DeviceContractTest, RefusesAllocationPastCapacity) {
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer big,
                              device_->Allocate(60 * kMiB, MemoryCategory::kParams));
  EXPECT_EQ(device_->MemoryInfo().used, 60 * kMiB);

  Result<DeviceBuffer> refused = device_->Allocate(12 * kMiB, MemoryCategory::kParams);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  const std::string expected =
      fmt::format("device {}: cannot allocate 12.00 MiB for params: 60.00 MiB of 64.00 MiB in use",
                  device_->name());
  EXPECT_THAT(refused.status().message(), HasSubstr(expected));
  EXPECT_THAT(refused.status().message(), HasSubstr("raise device.memory_limit"));

  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device_->CreateStream());
  Result<DeviceBuffer> refused_async =
      device_->AllocateAsync(12 * kMiB, MemoryCategory::kActivations, *stream);
  ASSERT_FALSE(refused_async.ok());
  EXPECT_THAT(refused_async.status().message(),
              HasSubstr("cannot allocate 12.00 MiB for activations: 60.00 MiB of 64.00 MiB"));

  // What is left still fits exactly, and freeing makes room.
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer rest,
                              device_->Allocate(4 * kMiB, MemoryCategory::kGrads));
  EXPECT_EQ(device_->MemoryInfo().free, 0u);
  big.Reset();
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer again,
                              device_->Allocate(12 * kMiB, MemoryCategory::kParams));
  EXPECT_EQ(device_->MemoryInfo().used, 16 * kMiB);
}

TEST_P(DeviceContractTest, AllocationsAreAlignedAndZeroBytesIsEmpty) {
  std::vector<DeviceBuffer> buffers;
  uint64_t reserved = 0;
  for (size_t bytes : {size_t{1}, size_t{255}, size_t{257}, size_t{4096}, size_t{1000000}}) {
    ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer buffer,
                                device_->Allocate(bytes, MemoryCategory::kBuffers));
    EXPECT_EQ(buffer.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kDeviceAlignment, 0u) << bytes;
    EXPECT_EQ(buffer.device(), device_.get());
    EXPECT_EQ(buffer.category(), MemoryCategory::kBuffers);
    reserved += AlignUp(bytes, kDeviceAlignment);
    buffers.push_back(std::move(buffer));
  }
  EXPECT_EQ(device_->MemoryInfo().used, reserved);
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer empty, device_->Allocate(0, MemoryCategory::kBuffers));
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(device_->MemoryInfo().used, reserved);
  buffers.clear();
  EXPECT_EQ(device_->MemoryInfo().used, 0u);
}

TEST_P(DeviceContractTest, CopiesInEveryDirectionKeepTheData) {
  constexpr size_t kBytes = kMiB + 13;
  ASSERT_DEVICE_OK_AND_ASSIGN(PinnedBuffer pinned_src,
                              device_->AllocatePinnedHost(kBytes, MemoryCategory::kBuffers));
  ASSERT_DEVICE_OK_AND_ASSIGN(PinnedBuffer pinned_dst,
                              device_->AllocatePinnedHost(kBytes, MemoryCategory::kBuffers));
  FillPattern(pinned_src.data(), kBytes, 1);
  std::vector<uint8_t> pageable_src(kBytes);
  FillPattern(pageable_src.data(), kBytes, 2);
  std::vector<uint8_t> h2h_out(kBytes), pageable_out(kBytes), memset_out(kBytes);

  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d1, device_->Allocate(kBytes, MemoryCategory::kParams));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d2, device_->Allocate(kBytes, MemoryCategory::kParams));
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());

  ASSERT_DEVICE_OK(device_->CopyAsync(d1.data(), pinned_src.data(), kBytes, CopyKind::kH2D, *s));
  ASSERT_DEVICE_OK(device_->CopyAsync(d2.data(), d1.data(), kBytes, CopyKind::kD2D, *s));
  ASSERT_DEVICE_OK(device_->CopyAsync(pinned_dst.data(), d2.data(), kBytes, CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(
      device_->CopyAsync(h2h_out.data(), pinned_src.data(), kBytes, CopyKind::kH2H, *s));
  // d1 is overwritten only after the D2D copy above read it: same stream, in order.
  ASSERT_DEVICE_OK(device_->CopyAsync(d1.data(), pageable_src.data(), kBytes, CopyKind::kH2D, *s));
  ASSERT_DEVICE_OK(device_->CopyAsync(pageable_out.data(), d1.data(), kBytes, CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(device_->MemsetAsync(d2.data_as<uint8_t>() + 100, 0xAB, 1000, *s));
  ASSERT_DEVICE_OK(device_->CopyAsync(memset_out.data(), d2.data(), kBytes, CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(s->Synchronize());

  EXPECT_EQ(FirstMismatch(pinned_dst.data(), kBytes, 1), -1) << "H2D, D2D, D2H";
  EXPECT_EQ(FirstMismatch(h2h_out.data(), kBytes, 1), -1) << "H2H";
  EXPECT_EQ(FirstMismatch(pageable_out.data(), kBytes, 2), -1) << "pageable H2D, D2H";
  std::vector<uint8_t> expected(kBytes);
  FillPattern(expected.data(), kBytes, 1);
  std::memset(expected.data() + 100, 0xAB, 1000);
  EXPECT_TRUE(memset_out == expected) << "memset";
}

// The split of a fused [rows, a + b] activation into [rows, a] and [rows, b] and back.
TEST_P(DeviceContractTest, StridedCopySplitsAndMergesColumnBlocks) {
  constexpr size_t kRows = 37, kA = 24, kB = 40, kWidth = kA + kB;
  std::vector<uint8_t> fused(kRows * kWidth);
  FillPattern(fused.data(), fused.size(), 3);
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d_fused,
                              device_->Allocate(fused.size(), MemoryCategory::kActivations));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d_a,
                              device_->Allocate(kRows * kA, MemoryCategory::kActivations));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d_b,
                              device_->Allocate(kRows * kB, MemoryCategory::kActivations));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d_merged,
                              device_->Allocate(fused.size(), MemoryCategory::kActivations));
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK(
      device_->CopyAsync(d_fused.data(), fused.data(), fused.size(), CopyKind::kH2D, *s));
  ASSERT_DEVICE_OK(
      device_->Copy2DAsync(d_a.data(), kA, d_fused.data(), kWidth, kA, kRows, CopyKind::kD2D, *s));
  ASSERT_DEVICE_OK(device_->Copy2DAsync(d_b.data(), kB, d_fused.data_as<uint8_t>() + kA, kWidth, kB,
                                        kRows, CopyKind::kD2D, *s));
  ASSERT_DEVICE_OK(
      device_->Copy2DAsync(d_merged.data(), kWidth, d_a.data(), kA, kA, kRows, CopyKind::kD2D, *s));
  ASSERT_DEVICE_OK(device_->Copy2DAsync(d_merged.data_as<uint8_t>() + kA, kWidth, d_b.data(), kB,
                                        kB, kRows, CopyKind::kD2D, *s));
  std::vector<uint8_t> a(kRows * kA), merged(fused.size());
  // Device rows to a pitched host buffer: the D2H direction of the same call.
  std::vector<uint8_t> b_pitched(kRows * (kB + 8), 0);
  ASSERT_DEVICE_OK(device_->CopyAsync(a.data(), d_a.data(), a.size(), CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(device_->Copy2DAsync(b_pitched.data(), kB + 8, d_b.data(), kB, kB, kRows,
                                        CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(
      device_->CopyAsync(merged.data(), d_merged.data(), merged.size(), CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(s->Synchronize());
  EXPECT_EQ(merged, fused);
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t c = 0; c < kA; ++c)
      ASSERT_EQ(a[r * kA + c], fused[r * kWidth + c]) << r << "," << c;
    for (size_t c = 0; c < kB; ++c) {
      ASSERT_EQ(b_pitched[r * (kB + 8) + c], fused[r * kWidth + kA + c]) << r << "," << c;
    }
    for (size_t c = kB; c < kB + 8; ++c) ASSERT_EQ(b_pitched[r * (kB + 8) + c], 0) << "pad " << r;
  }
}

TEST_P(DeviceContractTest, StreamOrderedFreeIsReusableOnTheSameStreamAtOnce) {
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer hold,
                              device_->Allocate(48 * kMiB, MemoryCategory::kParams));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer first,
                              device_->AllocateAsync(16 * kMiB, MemoryCategory::kActivations, *s));
  ASSERT_DEVICE_OK(device_->MemsetAsync(first.data(), 1, 16 * kMiB, *s));
  first.FreeAsync(*s);
  EXPECT_TRUE(first.empty());
  // The device is full, but work enqueued on `s` from now on runs after the free.
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer second,
                              device_->AllocateAsync(16 * kMiB, MemoryCategory::kActivations, *s));
  ASSERT_DEVICE_OK(device_->MemsetAsync(second.data(), 7, 16 * kMiB, *s));
  std::vector<uint8_t> head(4096), tail(4096);
  ASSERT_DEVICE_OK(device_->CopyAsync(head.data(), second.data(), head.size(), CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(device_->CopyAsync(tail.data(), second.data_as<uint8_t>() + 16 * kMiB - 4096,
                                      tail.size(), CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(s->Synchronize());
  EXPECT_EQ(head, std::vector<uint8_t>(4096, 7));
  EXPECT_EQ(tail, std::vector<uint8_t>(4096, 7));
  second.Reset();  // freed on `s`, its allocation stream
  hold.Reset();
  ASSERT_DEVICE_OK(s->Synchronize());
  EXPECT_EQ(device_->MemoryInfo().used, 0u);
  // All of it is one block again.
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer all,
                              device_->Allocate(kMemoryLimit, MemoryCategory::kParams));
}

TEST_P(DeviceContractTest, BufferOutlivingItsStreamIsFreedSafely) {
  DeviceBuffer orphan;
  {
    ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
    ASSERT_DEVICE_OK_AND_ASSIGN(orphan,
                                device_->AllocateAsync(8 * kMiB, MemoryCategory::kActivations, *s));
    ASSERT_DEVICE_OK(device_->MemsetAsync(orphan.data(), 3, 8 * kMiB, *s));
  }  // the stream waits for its work when destroyed
  orphan.Reset();
  ASSERT_DEVICE_OK(device_->Synchronize());
  EXPECT_EQ(device_->MemoryInfo().used, 0u);
}

TEST_P(DeviceContractTest, PinnedHostMemoryIsUsableAndAccounted) {
  const MemorySnapshot before = MemoryLedger::Global().Snapshot();
  constexpr size_t kBytes = kMiB + 1;
  {
    ASSERT_DEVICE_OK_AND_ASSIGN(PinnedBuffer pinned,
                                device_->AllocatePinnedHost(kBytes, MemoryCategory::kOptimizer));
    EXPECT_EQ(pinned.size(), kBytes);
    EXPECT_EQ(pinned.category(), MemoryCategory::kOptimizer);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned.data()) % kDeviceAlignment, 0u);
    FillPattern(pinned.data(), kBytes, 9);
    EXPECT_EQ(FirstMismatch(pinned.data(), kBytes, 9), -1);
    const MemorySnapshot during = MemoryLedger::Global().Snapshot();
    EXPECT_GE(DeltaCurrent(during, before, MemoryTier::kHostPinned, MemoryCategory::kOptimizer),
              kBytes);
    EXPECT_LT(DeltaCurrent(during, before, MemoryTier::kHostPinned, MemoryCategory::kOptimizer),
              kBytes + 64 * 1024);
    EXPECT_EQ(during.tier(MemoryTier::kDevice).current, before.tier(MemoryTier::kDevice).current);
    EXPECT_EQ(device_->MemoryInfo().used, 0u);  // pinned memory is not device memory
  }
  EXPECT_EQ(MemoryLedger::Global().Snapshot().tier(MemoryTier::kHostPinned).current,
            before.tier(MemoryTier::kHostPinned).current);
}

TEST_P(DeviceContractTest, AccountingTracksDeviceAllocationsPerCategory) {
  MemoryLedger& ledger = MemoryLedger::Global();
  ledger.ResetPeaks();
  const MemorySnapshot before = ledger.Snapshot();
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer params,
                              device_->Allocate(4 * kMiB, MemoryCategory::kParams));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer grads,
                              device_->Allocate(2 * kMiB, MemoryCategory::kGrads));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer act,
                              device_->AllocateAsync(kMiB, MemoryCategory::kActivations, *s));
  const MemorySnapshot during = ledger.Snapshot();
  EXPECT_EQ(DeltaCurrent(during, before, MemoryTier::kDevice, MemoryCategory::kParams), 4 * kMiB);
  EXPECT_EQ(DeltaCurrent(during, before, MemoryTier::kDevice, MemoryCategory::kGrads), 2 * kMiB);
  EXPECT_EQ(DeltaCurrent(during, before, MemoryTier::kDevice, MemoryCategory::kActivations), kMiB);
  EXPECT_EQ(during.tier(MemoryTier::kDevice).current - before.tier(MemoryTier::kDevice).current,
            7 * kMiB);

  grads.Reset();
  act.FreeAsync(*s);
  ASSERT_DEVICE_OK(s->Synchronize());
  const MemorySnapshot after = ledger.Snapshot();
  EXPECT_EQ(DeltaCurrent(after, before, MemoryTier::kDevice, MemoryCategory::kGrads), 0u);
  EXPECT_EQ(DeltaCurrent(after, before, MemoryTier::kDevice, MemoryCategory::kActivations), 0u);
  EXPECT_EQ(DeltaCurrent(after, before, MemoryTier::kDevice, MemoryCategory::kParams), 4 * kMiB);
  EXPECT_EQ(after.at(MemoryTier::kDevice, MemoryCategory::kGrads).peak,
            before.at(MemoryTier::kDevice, MemoryCategory::kGrads).current + 2 * kMiB);
  EXPECT_EQ(after.tier(MemoryTier::kDevice).peak,
            before.tier(MemoryTier::kDevice).current + 7 * kMiB);
  EXPECT_THAT(after.FormatTable(), HasSubstr("device       grads"));
  ledger.ResetPeaks();
  EXPECT_EQ(ledger.Snapshot().tier(MemoryTier::kDevice).peak,
            before.tier(MemoryTier::kDevice).current + 4 * kMiB);
}

TEST_P(DeviceContractTest, WaitEventOrdersWorkAcrossStreams) {
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> a, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> b, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> e, device_->CreateEvent());
  std::atomic<bool> a_done{false};
  std::atomic<bool> b_saw_a_done{false};
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*a, [&] {
    std::this_thread::sleep_for(50ms);
    a_done = true;
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(e->Record(*a));
  ASSERT_DEVICE_OK(b->WaitEvent(*e));
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*b, [&] {
    b_saw_a_done = a_done.load();
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(b->Synchronize());
  EXPECT_TRUE(b_saw_a_done);
  ASSERT_DEVICE_OK(a->Synchronize());
}

TEST_P(DeviceContractTest, WaitingOnANeverRecordedEventIsANoOp) {
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> e, device_->CreateEvent());
  ASSERT_DEVICE_OK(s->WaitEvent(*e));
  std::atomic<bool> ran{false};
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*s, [&] {
    ran = true;
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(s->Synchronize());
  EXPECT_TRUE(ran);
  ASSERT_DEVICE_OK_AND_ASSIGN(bool complete, e->Query());
  EXPECT_TRUE(complete);
  ASSERT_DEVICE_OK(e->Synchronize());
}

// 8 streams x 200 links of one chain: link k runs on stream k % 8 after waiting for link k-1's
// event, snapshots the shared slot X (which link k-1 wrote) into Y[k], then writes its own pattern
// into X. Events are reused round-robin, so each wait must capture the record current at the
// WaitEvent call. Every stream also does unrelated memsets in between. If any wait let a copy run
// early, some Y[k] would hold the wrong link's pattern.
TEST_P(DeviceContractTest, ManyInterleavedStreamsFollowTheEventChain) {
  constexpr int kStreams = 8;
  constexpr int kLinksPerStream = 200;
  constexpr int kLinks = kStreams * kLinksPerStream;
  constexpr int kEvents = 5;
  constexpr size_t kSlot = 1024;

  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Event>> events;
  std::vector<DeviceBuffer> scratch;
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
    streams.push_back(std::move(s));
    ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer z,
                                device_->Allocate(64 * 1024, MemoryCategory::kBuffers));
    scratch.push_back(std::move(z));
  }
  for (int i = 0; i < kEvents; ++i) {
    ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> e, device_->CreateEvent());
    events.push_back(std::move(e));
  }
  ASSERT_DEVICE_OK_AND_ASSIGN(
      PinnedBuffer patterns, device_->AllocatePinnedHost(kLinks * kSlot, MemoryCategory::kBuffers));
  for (int k = 0; k < kLinks; ++k) FillPattern(patterns.data_as<uint8_t>() + k * kSlot, kSlot, k);
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer x, device_->Allocate(kSlot, MemoryCategory::kBuffers));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer y,
                              device_->Allocate(kLinks * kSlot, MemoryCategory::kBuffers));

  for (int k = 0; k < kLinks; ++k) {
    Stream& s = *streams[k % kStreams];
    if (k > 0) ASSERT_DEVICE_OK(s.WaitEvent(*events[(k - 1) % kEvents]));
    ASSERT_DEVICE_OK(
        device_->CopyAsync(y.data_as<uint8_t>() + k * kSlot, x.data(), kSlot, CopyKind::kD2D, s));
    ASSERT_DEVICE_OK(device_->CopyAsync(x.data(), patterns.data_as<uint8_t>() + k * kSlot, kSlot,
                                        CopyKind::kH2D, s));
    ASSERT_DEVICE_OK(events[k % kEvents]->Record(s));
    ASSERT_DEVICE_OK(device_->MemsetAsync(scratch[k % kStreams].data(), k & 0xff,
                                          scratch[k % kStreams].size(), s));
  }
  std::vector<uint8_t> snapshots(kLinks * kSlot);
  Stream& last = *streams[(kLinks - 1) % kStreams];
  ASSERT_DEVICE_OK(
      device_->CopyAsync(snapshots.data(), y.data(), snapshots.size(), CopyKind::kD2H, last));
  ASSERT_DEVICE_OK(device_->Synchronize());
  int wrong = 0;
  for (int k = 1; k < kLinks; ++k) {
    if (FirstMismatch(snapshots.data() + k * kSlot, kSlot, k - 1) != -1) {
      if (++wrong <= 5) ADD_FAILURE() << "link " << k << " did not see link " << k - 1 << "'s data";
    }
  }
  EXPECT_EQ(wrong, 0);
  // Each stream's memsets ran in its order: the last value written is its last link's.
  for (int i = 0; i < kStreams; ++i) {
    uint8_t value = 0;
    ASSERT_DEVICE_OK(device_->CopyAsync(&value, scratch[i].data_as<uint8_t>() + 777, 1,
                                        CopyKind::kD2H, *streams[i]));
    ASSERT_DEVICE_OK(streams[i]->Synchronize());
    EXPECT_EQ(value, ((kLinksPerStream - 1) * kStreams + i) & 0xff) << "stream " << i;
  }
}

TEST_P(DeviceContractTest, EventsMeasureElapsedTime) {
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> start, device_->CreateEvent());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> end, device_->CreateEvent());
  Result<float> unrecorded = ElapsedMs(*start, *end);
  ASSERT_FALSE(unrecorded.ok());
  EXPECT_EQ(unrecorded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(unrecorded.status().message(), HasSubstr("never recorded"));

  ASSERT_DEVICE_OK(start->Record(*s));
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*s, [] {
    std::this_thread::sleep_for(30ms);
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(end->Record(*s));
  ASSERT_DEVICE_OK(end->Synchronize());
  ASSERT_DEVICE_OK_AND_ASSIGN(float ms, ElapsedMs(*start, *end));
  EXPECT_GE(ms, 29.0f);
  EXPECT_LT(ms, 5000.0f);
}

TEST_P(DeviceContractTest, EventQueryReflectsCompletion) {
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> e, device_->CreateEvent());
  std::atomic<bool> release{false};
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*s, [&] {
    // Bounded so that a broken test cannot hang the stream.
    for (int i = 0; i < 500 && !release; ++i) std::this_thread::sleep_for(10ms);
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(e->Record(*s));
  ASSERT_DEVICE_OK_AND_ASSIGN(bool done_early, e->Query());
  EXPECT_FALSE(done_early);
  ASSERT_DEVICE_OK_AND_ASSIGN(bool stream_idle_early, s->Query());
  EXPECT_FALSE(stream_idle_early);
  release = true;
  ASSERT_DEVICE_OK(e->Synchronize());
  ASSERT_DEVICE_OK_AND_ASSIGN(bool done, e->Query());
  EXPECT_TRUE(done);
  ASSERT_DEVICE_OK(s->Synchronize());
  ASSERT_DEVICE_OK_AND_ASSIGN(bool idle, s->Query());
  EXPECT_TRUE(idle);
}

TEST_P(DeviceContractTest, HostFunctionErrorIsStickyOnItsStream) {
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> other, device_->CreateStream());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> before, device_->CreateEvent());
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Event> after, device_->CreateEvent());
  std::atomic<bool> later_work_ran{false};
  std::atomic<bool> other_ran{false};

  ASSERT_DEVICE_OK(before->Record(*s));
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(
      *s, [] { return InternalError("boom"); }, "failing step"));
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*s, [&] {
    later_work_ran = true;
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(after->Record(*s));
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*other, [&] {
    other_ran = true;
    return OkStatus();
  }));

  const Status first = s->Synchronize();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.code(), StatusCode::kInternal);
  EXPECT_THAT(first.message(), HasSubstr("boom"));
  EXPECT_THAT(first.message(), HasSubstr("failing step"));
  EXPECT_THAT(first.message(), HasSubstr(s->name()));
  EXPECT_FALSE(later_work_ran);
  EXPECT_THAT(s->Synchronize().message(), HasSubstr("boom"));  // sticky
  EXPECT_THAT(s->Query().status().message(), HasSubstr("boom"));
  EXPECT_THAT(after->Synchronize().message(), HasSubstr("boom"));
  EXPECT_THAT(after->Query().status().message(), HasSubstr("boom"));
  EXPECT_DEVICE_OK_STATUS(before->Synchronize());
  EXPECT_THAT(device_->Synchronize().message(), HasSubstr("boom"));
  // Other streams are not affected.
  EXPECT_DEVICE_OK_STATUS(other->Synchronize());
  EXPECT_TRUE(other_ran);
}

TEST_P(DeviceContractTest, ExceptionInHostFunctionBecomesTheStickyError) {
  ASSERT_DEVICE_OK_AND_ASSIGN(std::unique_ptr<Stream> s, device_->CreateStream());
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(
      *s, []() -> Status { throw std::runtime_error("kaboom"); }, "throwing step"));
  const Status status = s->Synchronize();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("threw an exception: kaboom"));
  EXPECT_THAT(status.message(), HasSubstr("throwing step"));
}

}  // namespace sluice
