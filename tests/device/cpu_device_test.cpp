// What only the CPU backend can show: exact arena behaviour, gated streams (a host function that
// blocks until the test opens it), and host functions touching device memory directly.
#include "runtime/device/cpu/cpu_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/device/device_factory.h"
#include "tests/device/device_test_util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing_util::kMiB;

// Blocks a stream until Open(); bounded so that a failing test cannot hang.
class Gate {
 public:
  std::function<Status()> Closed() {
    return [this] {
      if (future_.wait_for(10s) != std::future_status::ready) {
        return DeadlineExceededError("gate never opened");
      }
      return OkStatus();
    };
  }
  void Open() { promise_.set_value(); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

class CpuDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(0, 64 * kMiB);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
  }

  std::unique_ptr<Stream> NewStream() {
    Result<std::unique_ptr<Stream>> stream = device_->CreateStream();
    SLUICE_CHECK(stream.ok());
    return std::move(stream).value();
  }
  std::unique_ptr<Event> NewEvent() {
    Result<std::unique_ptr<Event>> event = device_->CreateEvent();
    SLUICE_CHECK(event.ok());
    return std::move(event).value();
  }

  std::unique_ptr<CpuDevice> device_;
};

TEST_F(CpuDeviceTest, RefusalMessageNamesRequestUseLimitAndLargestBlock) {
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer big,
                              device_->Allocate(60 * kMiB, MemoryCategory::kParams));
  Result<DeviceBuffer> refused = device_->Allocate(12 * kMiB, MemoryCategory::kParams);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(),
            "ResourceExhausted: device cpu:0: cannot allocate 12.00 MiB for params: 60.00 MiB of "
            "64.00 MiB in use (largest free block 4.00 MiB); raise device.memory_limit or keep "
            "less on the device (smaller micro-batch, zero_optimization.offload_param / "
            "offload_optimizer)");
}

TEST_F(CpuDeviceTest, FragmentationIsRealAndCoalescingHealsIt) {
  std::vector<DeviceBuffer> blocks;
  for (int i = 0; i < 8; ++i) {
    ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer b,
                                device_->Allocate(8 * kMiB, MemoryCategory::kParams));
    blocks.push_back(std::move(b));
  }
  void* second = blocks[1].data();
  for (int i = 1; i < 8; i += 2) blocks[i].Reset();
  EXPECT_EQ(device_->MemoryInfo().free, 32 * kMiB);
  EXPECT_EQ(device_->MemoryInfo().largest_free_block, 8 * kMiB);

  Result<DeviceBuffer> refused = device_->Allocate(16 * kMiB, MemoryCategory::kGrads);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("cannot allocate 16.00 MiB for grads: 32.00 MiB of 64.00 MiB in use "
                        "(largest free block 8.00 MiB)"));

  blocks[2].Reset();  // joins the holes of blocks 1 and 3
  EXPECT_EQ(device_->MemoryInfo().largest_free_block, 24 * kMiB);
  EXPECT_EQ(device_->ArenaStats().free_blocks, 3u);
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer joined,
                              device_->Allocate(20 * kMiB, MemoryCategory::kGrads));
  EXPECT_EQ(joined.data(), second);
}

TEST_F(CpuDeviceTest, StreamOrderedFreeReturnsMemoryWhenTheStreamReachesIt) {
  auto s = NewStream();
  auto other = NewStream();
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer hold,
                              device_->Allocate(32 * kMiB, MemoryCategory::kParams));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer a,
                              device_->Allocate(32 * kMiB, MemoryCategory::kActivations));
  void* a_data = a.data();
  Gate gate;
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*s, gate.Closed(), "gate"));
  a.FreeAsync(*s);
  EXPECT_EQ(device_->MemoryInfo().used, 64 * kMiB);

  // A stream's own task does not wait for the free: it may be queued behind that very task.
  Status in_task;
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*other, [&] {
    in_task = device_->Allocate(32 * kMiB, MemoryCategory::kActivations).status();
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(other->Synchronize());
  EXPECT_THAT(in_task.message(),
              HasSubstr("(largest free block 0 B, 32.00 MiB waiting for stream-ordered frees)"));

  // The host waits for the stream to reach the free, and gets the memory.
  std::thread opener([&gate] {
    std::this_thread::sleep_for(100ms);
    gate.Open();
  });
  const auto start = std::chrono::steady_clock::now();
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer b,
                              device_->Allocate(32 * kMiB, MemoryCategory::kActivations));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 90ms);
  opener.join();
  EXPECT_EQ(b.data(), a_data);
  EXPECT_EQ(device_->MemoryInfo().used, 64 * kMiB);
}

TEST_F(CpuDeviceTest, MemoryFreedOnAFailedStreamIsNeverReused) {
  auto s = NewStream();
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer a,
                              device_->Allocate(32 * kMiB, MemoryCategory::kBuffers));
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(
      *s, [] { return DeadlineExceededError("a collective timed out"); }, "collective"));
  a.FreeAsync(*s);  // the failed work may still write into it
  EXPECT_FALSE(s->Synchronize().ok());
  EXPECT_EQ(device_->MemoryInfo().used, 32 * kMiB);
  EXPECT_EQ(device_->ArenaStats().abandoned, 32 * kMiB);
  // Neither waited for nor handed out again: only the other half of the device is left.
  EXPECT_FALSE(device_->Allocate(48 * kMiB, MemoryCategory::kBuffers).ok());
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer b,
                              device_->Allocate(32 * kMiB, MemoryCategory::kBuffers));
  EXPECT_NE(b.data(), nullptr);
}

TEST_F(CpuDeviceTest, WaitCapturesTheRecordCurrentAtTheCall) {
  auto a = NewStream();
  auto b = NewStream();
  auto c = NewStream();
  auto e = NewEvent();
  Gate gate_a;
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*a, gate_a.Closed()));
  ASSERT_DEVICE_OK(e->Record(*a));
  ASSERT_DEVICE_OK(b->WaitEvent(*e));
  std::atomic<bool> b_ran{false};
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*b, [&] {
    b_ran = true;
    return OkStatus();
  }));
  // Recording e again on an idle stream does not release the wait already enqueued on b.
  ASSERT_DEVICE_OK(e->Record(*c));
  ASSERT_DEVICE_OK(c->Synchronize());
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(b_ran);
  gate_a.Open();
  ASSERT_DEVICE_OK(b->Synchronize());
  EXPECT_TRUE(b_ran);
}

TEST_F(CpuDeviceTest, RecordingLaterOnABlockedStreamDoesNotDelayEarlierWaits) {
  auto a = NewStream();
  auto b = NewStream();
  auto c = NewStream();
  auto e = NewEvent();
  ASSERT_DEVICE_OK(e->Record(*a));  // a is idle: completes at once
  ASSERT_DEVICE_OK(b->WaitEvent(*e));
  Gate gate_c;
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*c, gate_c.Closed()));
  ASSERT_DEVICE_OK(e->Record(*c));  // would block b if the wait looked at the latest record
  const auto start = std::chrono::steady_clock::now();
  ASSERT_DEVICE_OK(b->Synchronize());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_DEVICE_OK_AND_ASSIGN(bool done, e->Query());
  EXPECT_FALSE(done);  // the event now stands for c's gated point
  gate_c.Open();
  ASSERT_DEVICE_OK(e->Synchronize());
}

TEST_F(CpuDeviceTest, CrossWaitsInBothDirectionsDoNotDeadlock) {
  auto a = NewStream();
  auto b = NewStream();
  auto ea = NewEvent();
  auto eb = NewEvent();
  for (int i = 0; i < 200; ++i) {
    ASSERT_DEVICE_OK(ea->Record(*a));
    ASSERT_DEVICE_OK(eb->Record(*b));
    ASSERT_DEVICE_OK(a->WaitEvent(*eb));
    ASSERT_DEVICE_OK(b->WaitEvent(*ea));
  }
  ASSERT_DEVICE_OK(device_->Synchronize());
}

TEST_F(CpuDeviceTest, ErrorsFlowIntoStreamsWaitingOnAFailedEvent) {
  auto a = NewStream();
  auto b = NewStream();
  auto e = NewEvent();
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(
      *a, [] { return IoError("disk on fire"); }, "load"));
  ASSERT_DEVICE_OK(e->Record(*a));
  ASSERT_DEVICE_OK(b->WaitEvent(*e));
  std::atomic<bool> b_ran{false};
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*b, [&] {
    b_ran = true;
    return OkStatus();
  }));
  const Status status = b->Synchronize();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_THAT(status.message(), HasSubstr("WaitEvent on an event recorded on " + a->name()));
  EXPECT_THAT(status.message(), HasSubstr("disk on fire"));
  EXPECT_FALSE(b_ran);
}

TEST_F(CpuDeviceTest, HostFunctionCannotWaitForItsOwnStream) {
  auto s = NewStream();
  auto later = NewEvent();
  Status inner_sync;
  Status inner_event;
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(*s, [&] {
    inner_sync = s->Synchronize();
    inner_event = later->Synchronize();
    return OkStatus();
  }));
  ASSERT_DEVICE_OK(later->Record(*s));
  ASSERT_DEVICE_OK(s->Synchronize());
  EXPECT_EQ(inner_sync.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(inner_sync.message(), HasSubstr("it would wait for itself"));
  // The event was recorded after the function was enqueued, but possibly before it ran.
  if (!inner_event.ok()) {
    EXPECT_EQ(inner_event.code(), StatusCode::kFailedPrecondition);
  }
}

TEST_F(CpuDeviceTest, HostFunctionsWorkOnDeviceMemoryInStreamOrder) {
  auto s = NewStream();
  constexpr size_t kCount = 1 << 16;
  ASSERT_DEVICE_OK_AND_ASSIGN(
      DeviceBuffer buffer,
      device_->AllocateAsync(kCount * sizeof(float), MemoryCategory::kActivations, *s));
  ASSERT_DEVICE_OK(device_->MemsetAsync(buffer.data(), 0, buffer.size(), *s));
  float* data = buffer.data_as<float>();
  for (int step = 1; step <= 3; ++step) {
    ASSERT_DEVICE_OK(device_->LaunchHostFunc(
        *s,
        [data, step] {
          for (size_t i = 0; i < kCount; ++i) data[i] = data[i] * 2 + static_cast<float>(step);
          return OkStatus();
        },
        "scale-add kernel"));
  }
  std::vector<float> out(kCount);
  ASSERT_DEVICE_OK(device_->CopyAsync(out.data(), data, buffer.size(), CopyKind::kD2H, *s));
  ASSERT_DEVICE_OK(s->Synchronize());
  EXPECT_EQ(out.front(), 11.0f);  // ((0*2+1)*2+2)*2+3
  EXPECT_EQ(out.back(), 11.0f);
}

TEST_F(CpuDeviceTest, CopiesWithPointersOfTheWrongSideAreRejected) {
  auto s = NewStream();
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d, device_->Allocate(4096, MemoryCategory::kBuffers));
  std::vector<uint8_t> host(8192);
  const Status device_as_host = device_->CopyAsync(d.data(), d.data(), 4096, CopyKind::kH2D, *s);
  EXPECT_EQ(device_as_host.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(device_as_host.message(), HasSubstr("src"));
  EXPECT_THAT(device_as_host.message(), HasSubstr("is device memory, not host memory"));
  const Status host_as_device =
      device_->CopyAsync(host.data(), host.data() + 4096, 4096, CopyKind::kD2H, *s);
  EXPECT_EQ(host_as_device.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(host_as_device.message(), HasSubstr("is not memory of this device"));
  const Status past_the_end =
      device_->MemsetAsync(d.data_as<uint8_t>() + 64 * kMiB - 4096 - 256, 0, 8192, *s);
  EXPECT_TRUE(past_the_end.ok() || past_the_end.code() == StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->MemsetAsync(nullptr, 0, 16, *s).code(), StatusCode::kInvalidArgument);
  ASSERT_DEVICE_OK(s->Synchronize());  // rejected calls enqueue nothing and leave no error
}

uint64_t LockedKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

TEST_F(CpuDeviceTest, PinnedMemoryIsPageAlignedAndLockedWhenAllowed) {
  [[maybe_unused]] const uint64_t locked_before = LockedKiB();
  ASSERT_DEVICE_OK_AND_ASSIGN(
      PinnedBuffer pinned, device_->AllocatePinnedHost(3 * kMiB + 5, MemoryCategory::kOptimizer));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned.data()) % sysconf(_SC_PAGESIZE), 0u);
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)  // they make mlock a no-op
  if (pinned.page_locked()) {
    EXPECT_GE(LockedKiB() - locked_before, 3 * 1024u);
  }
  pinned.Reset();
  EXPECT_EQ(LockedKiB(), locked_before);
#endif
}

TEST_F(CpuDeviceTest, ManyThreadsAllocatingAndFreeingKeepTheArenaConsistent) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 1500;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(NewStream());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<DeviceBuffer> live;
      for (int i = 0; i < kRounds; ++i) {
        const size_t bytes = 256 + rng() % (512 * 1024);
        Result<DeviceBuffer> buffer =
            rng() % 2 ? device_->Allocate(bytes, MemoryCategory::kActivations)
                      : device_->AllocateAsync(bytes, MemoryCategory::kActivations, *streams[t]);
        if (buffer.ok()) {
          if (device_->MemsetAsync(buffer->data(), t, bytes, *streams[t]).ok()) {
            live.push_back(std::move(buffer).value());
          } else {
            ++failures;
          }
        } else if (buffer.status().code() != StatusCode::kResourceExhausted) {
          ++failures;
        }
        if (live.size() > 8 || (!live.empty() && rng() % 3 == 0)) {
          const size_t victim = rng() % live.size();
          live[victim].FreeAsync(*streams[t]);  // ordered after this thread's memsets
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
        }
      }
      for (DeviceBuffer& buffer : live) buffer.FreeAsync(*streams[t]);
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_DEVICE_OK(device_->Synchronize());
  EXPECT_EQ(failures, 0);
  const CpuArena::Stats stats = device_->ArenaStats();
  EXPECT_EQ(stats.used, 0u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.free_blocks, 1u);
  EXPECT_EQ(stats.largest_free_block, 64 * kMiB);
}

TEST(CpuDeviceFactory, CpuDeviceNeedsAMemoryLimit) {
  Result<std::unique_ptr<Device>> device = CreateDevice({DeviceKind::kCpu, 0, 0});
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(device.status().message(), HasSubstr("device.memory_limit"));
}

TEST(CpuDeviceFactory, CudaWithoutAGpuIsUnavailable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA GPU is present";
  Result<std::unique_ptr<Device>> device = CreateDevice({DeviceKind::kCuda, 0, 64 * kMiB});
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  // Built without CUDA, or built with it on a machine without a usable GPU.
  EXPECT_THAT(
      device.status().message(),
      ::testing::AnyOf(HasSubstr("built without CUDA"), HasSubstr("device cuda:0 requested but")));
}

TEST(CpuDeviceFactory, ParsesDeviceKinds) {
  EXPECT_EQ(*ParseDeviceKind("cpu"), DeviceKind::kCpu);
  EXPECT_EQ(*ParseDeviceKind("cuda"), DeviceKind::kCuda);
  EXPECT_THAT(ParseDeviceKind("tpu").status().message(), HasSubstr("unknown device kind \"tpu\""));
}

TEST(CpuDeviceDeathTest, DestroyingADeviceBeforeItsBuffersAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = CpuDevice::Create(0, kMiB).value();
        DeviceBuffer buffer = device->Allocate(4096, MemoryCategory::kParams).value();
        device.reset();
      },
      "destroy every DeviceBuffer before its Device");
}

}  // namespace
}  // namespace sluice
