// Device memory protection on the CPU backend (runtime/device/cpu/memory_protection.h): host
// threads fault on device memory and the report names the buffer; stream work (copies, host
// functions, the OpenMP and OpenBLAS teams of host functions) reaches it. Every test that needs
// protection keys skips itself, saying why, where the CPU or kernel has none or
// SLUICE_DEVICE_PROTECT=off overrides the request.
#include "runtime/device/cpu/memory_protection.h"

#include <cblas.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/device/cpu/cpu_device.h"
#include "runtime/device/device_factory.h"
#include "tests/device/device_test_util.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing_util::kMiB;

// Sets an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

class MemoryProtectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Where it cannot be on, say why and skip: no protection keys (FailedPrecondition), or the
    // environment turned it off for this run.
    Result<DeviceProtectionDecision> decision =
        DecideDeviceMemoryProtection(DeviceMemoryProtection::kOn);
    if (!decision.ok()) GTEST_SKIP() << decision.status().ToString();
    if (!decision->active) GTEST_SKIP() << "device memory protection is " << decision->explanation;
    Result<std::unique_ptr<CpuDevice>> device =
        CpuDevice::Create(0, 64 * kMiB, DeviceMemoryProtection::kOn);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
    ASSERT_TRUE(device_->memory_protected());
    Result<std::unique_ptr<Stream>> stream = device_->CreateStream();
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    stream_ = std::move(stream).value();
  }

  void TearDown() override { stream_.reset(); }

  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<Stream> stream_;
};

using MemoryProtectionDeathTest = MemoryProtectionTest;

int ReadWithoutCoreDump(const volatile int* pointer) {
  rlimit no_core{};  // the child is meant to crash: no core file
  setrlimit(RLIMIT_CORE, &no_core);
  return *pointer;
}

TEST_F(MemoryProtectionDeathTest, HostReadFaultsAndTheReportNamesTheAllocation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer buffer,
                              device_->Allocate(1000, MemoryCategory::kActivations));
  ASSERT_DEVICE_OK(device_->MemsetAsync(buffer.data(), 7, buffer.size(), *stream_));
  ASSERT_DEVICE_OK(stream_->Synchronize());
  const volatile uint8_t* bytes = buffer.data_as<const volatile uint8_t>();
  EXPECT_DEATH(
      { [[maybe_unused]] uint8_t value = bytes[100]; },
      "host thread [0-9]+ read device memory at 0x[0-9a-f]+: allocation 'activations' of 1000 "
      "bytes, offset 100, on device cpu:0; device memory may only be touched by ops enqueued on "
      "a stream");
}

TEST_F(MemoryProtectionDeathTest, WriteFromAnotherHostThreadFaultsToo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer buffer,
                              device_->AllocateAsync(4096, MemoryCategory::kGrads, *stream_));
  float* data = buffer.data_as<float>();
  EXPECT_DEATH(
      {
        std::thread writer([data] { data[3] = 1.0f; });
        writer.join();
      },
      "host thread [0-9]+ wrote device memory at 0x[0-9a-f]+: allocation 'grads' of 4096 bytes, "
      "offset 12, on device cpu:0;.*AllocateAsync on stream cpu:0/stream");
}

TEST_F(MemoryProtectionDeathTest, OtherFaultsGoToThePreviousHandler) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // A read of a page no one may read is no device access: it dies of SIGSEGV as it would without
  // protection. (Not a null dereference: that is undefined behaviour, which UBSan reports
  // instead of letting the read fault.)
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  EXPECT_EXIT(ReadWithoutCoreDump(static_cast<const volatile int*>(page)),
              ::testing::KilledBySignal(SIGSEGV), "^$");
  munmap(page, 4096);
}

TEST_F(MemoryProtectionTest, CopiesAndHostFunctionsReachProtectedMemory) {
  constexpr size_t kCount = 1 << 16;
  ASSERT_DEVICE_OK_AND_ASSIGN(
      PinnedBuffer pinned,
      device_->AllocatePinnedHost(kCount * sizeof(float), MemoryCategory::kBuffers));
  // Pinned host memory is the host's to touch, as with cudaHostAlloc.
  float* host = pinned.data_as<float>();
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(i);
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer buffer,
                              device_->Allocate(kCount * sizeof(float), MemoryCategory::kParams));
  ASSERT_DEVICE_OK(
      device_->CopyAsync(buffer.data(), host, buffer.size(), CopyKind::kH2D, *stream_));
  float* data = buffer.data_as<float>();
  bool worker_may_access = false;
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(
      *stream_,
      [data, pkey = device_->protection_key(), &worker_may_access] {
        worker_may_access = ThreadMayAccessDeviceMemory(pkey);
        for (size_t i = 0; i < kCount; ++i) data[i] = data[i] * 2 + 1;
        return OkStatus();
      },
      "scale-add kernel"));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer copy,
                              device_->Allocate(buffer.size(), MemoryCategory::kParams));
  ASSERT_DEVICE_OK(
      device_->CopyAsync(copy.data(), buffer.data(), buffer.size(), CopyKind::kD2D, *stream_));
  std::vector<float> out(kCount);
  ASSERT_DEVICE_OK(
      device_->CopyAsync(out.data(), copy.data(), copy.size(), CopyKind::kD2H, *stream_));
  ASSERT_DEVICE_OK(stream_->Synchronize());
  EXPECT_TRUE(worker_may_access);
  EXPECT_FALSE(ThreadMayAccessDeviceMemory(device_->protection_key()));
  for (size_t i = 0; i < kCount; i += 997) {
    ASSERT_EQ(out[i], static_cast<float>(i) * 2 + 1) << "element " << i;
  }
}

// libgomp keeps one pool of threads per master thread, created by that master, and Linux copies
// PKRU into a new thread: the team of a host function is made by the worker while it holds
// access. The test thread's own pool (made without access) must not be the one reused.
TEST_F(MemoryProtectionTest, OpenMpTeamsOfHostFunctionsReachProtectedMemory) {
  // make test-tsan caps OpenMP teams at one thread (OMP_THREAD_LIMIT=1): no team to check.
  if (omp_get_thread_limit() < 4) {
    GTEST_SKIP() << "OpenMP teams are capped at " << omp_get_thread_limit() << " thread(s)";
  }
  const int pkey = device_->protection_key();
  std::mutex mu;
  std::set<long> host_team;
#pragma omp parallel num_threads(4)
  {
    std::lock_guard<std::mutex> lock(mu);
    host_team.insert(syscall(SYS_gettid));
    EXPECT_FALSE(ThreadMayAccessDeviceMemory(pkey)) << "a thread of the test thread's team";
  }
  ASSERT_EQ(host_team.size(), 4u);

  constexpr int64_t kCount = 1 << 20;
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer buffer,
                              device_->Allocate(kCount * sizeof(float), MemoryCategory::kParams));
  ASSERT_DEVICE_OK(device_->MemsetAsync(buffer.data(), 0, buffer.size(), *stream_));
  float* data = buffer.data_as<float>();
  std::set<long> device_team;
  int denied = 0;
  // Twice: the second host function reuses the pool the first one created.
  for (int round = 1; round <= 2; ++round) {
    // (A pragma cannot sit inside a macro argument, so the kernel is named first.)
    auto kernel = [&, round] {
#pragma omp parallel num_threads(4)
      {
        {
          std::lock_guard<std::mutex> lock(mu);
          device_team.insert(syscall(SYS_gettid));
          if (!ThreadMayAccessDeviceMemory(pkey)) ++denied;
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < kCount; ++i) data[i] += static_cast<float>(round);
      }
      return OkStatus();
    };
    ASSERT_DEVICE_OK(device_->LaunchHostFunc(*stream_, kernel, "omp add kernel"));
  }
  float sample[3] = {};
  ASSERT_DEVICE_OK(device_->CopyAsync(&sample[0], data, 4, CopyKind::kD2H, *stream_));
  ASSERT_DEVICE_OK(device_->CopyAsync(&sample[1], data + kCount / 2, 4, CopyKind::kD2H, *stream_));
  ASSERT_DEVICE_OK(device_->CopyAsync(&sample[2], data + kCount - 1, 4, CopyKind::kD2H, *stream_));
  ASSERT_DEVICE_OK(stream_->Synchronize());
  EXPECT_EQ(denied, 0);
  EXPECT_EQ(device_team.size(), 4u) << "the second round reuses the first round's team";
  for (long tid : device_team) EXPECT_EQ(host_team.count(tid), 0u) << "thread " << tid;
  for (float value : sample) EXPECT_EQ(value, 3.0f);
}

// OpenBLAS is the OpenMP build: its GEMM threads are the calling worker's libgomp team.
TEST_F(MemoryProtectionTest, OpenBlasGemmInAHostFunctionReachesProtectedMemory) {
  // OpenBLAS's OpenMP build waits forever for team members a thread cap denies it (make
  // test-tsan caps OpenMP teams at one thread).
  if (omp_get_thread_limit() < 4) {
    GTEST_SKIP() << "OpenMP teams are capped at " << omp_get_thread_limit() << " thread(s)";
  }
  constexpr int kN = 384;  // large enough for OpenBLAS to use every thread it has
  const size_t bytes = sizeof(float) * kN * kN;
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer a, device_->Allocate(bytes, MemoryCategory::kParams));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer b,
                              device_->Allocate(bytes, MemoryCategory::kActivations));
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer c,
                              device_->Allocate(bytes, MemoryCategory::kActivations));
  std::vector<float> ones(kN * kN, 1.0f);
  ASSERT_DEVICE_OK(device_->CopyAsync(a.data(), ones.data(), bytes, CopyKind::kH2D, *stream_));
  ASSERT_DEVICE_OK(device_->CopyAsync(b.data(), ones.data(), bytes, CopyKind::kH2D, *stream_));
  float* pa = a.data_as<float>();
  float* pb = b.data_as<float>();
  float* pc = c.data_as<float>();
  ASSERT_DEVICE_OK(device_->LaunchHostFunc(
      *stream_,
      [=] {
        openblas_set_num_threads(4);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, pa, kN, pb, kN,
                    0.0f, pc, kN);
        return OkStatus();
      },
      "sgemm"));
  std::vector<float> out(kN * kN);
  ASSERT_DEVICE_OK(device_->CopyAsync(out.data(), c.data(), bytes, CopyKind::kD2H, *stream_));
  ASSERT_DEVICE_OK(stream_->Synchronize());
  EXPECT_EQ(out.front(), static_cast<float>(kN));
  EXPECT_EQ(out.back(), static_cast<float>(kN));
}

TEST_F(MemoryProtectionTest, ReportSaysWhenNoLiveAllocationIsThereOrTheAccessIsInThePadding) {
  ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer buffer,
                              device_->Allocate(100, MemoryCategory::kOptimizer));
  const auto begin = reinterpret_cast<uintptr_t>(buffer.data());
  char report[1024];
  std::string text(
      report, internal::FormatDeviceAccessFault(report, sizeof(report), 42, false, begin + 120, 1));
  EXPECT_THAT(text, StartsWith("host thread 42 read device memory at 0x"));
  EXPECT_THAT(text, HasSubstr(": allocation 'optimizer' of 100 bytes, offset 120 (past its end, "
                              "in its alignment padding), on device cpu:0;"));
  buffer.Reset();
  text.assign(report,
              internal::FormatDeviceAccessFault(report, sizeof(report), 42, true, begin, 1));
  EXPECT_THAT(text, HasSubstr("wrote device memory at"));
  EXPECT_THAT(text,
              HasSubstr(": no live allocation there (freed or never allocated; arena offset "));
}

TEST_F(MemoryProtectionTest, ManyLiveBuffersAreAllNamed) {
  // More buffers than one chunk of the fault handler's table holds.
  std::vector<DeviceBuffer> buffers;
  for (int i = 0; i < 3000; ++i) {
    ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer buffer,
                                device_->Allocate(256 + i % 7, MemoryCategory::kBuffers));
    buffers.push_back(std::move(buffer));
  }
  for (int i = 0; i < 3000; i += 2) buffers[i].Reset();
  char report[1024];
  for (int i = 1; i < 3000; i += 332) {  // odd: still alive
    const auto address = reinterpret_cast<uintptr_t>(buffers[i].data()) + 5;
    const std::string text(
        report, internal::FormatDeviceAccessFault(report, sizeof(report), 1, false, address, 1));
    EXPECT_THAT(text,
                HasSubstr(fmt::format("allocation 'buffers' of {} bytes, offset 5,", 256 + i % 7)));
  }
}

TEST(DeviceMemoryProtectionMode, ParsesNames) {
  EXPECT_EQ(*ParseDeviceMemoryProtection("on"), DeviceMemoryProtection::kOn);
  EXPECT_EQ(*ParseDeviceMemoryProtection("OFF"), DeviceMemoryProtection::kOff);
  EXPECT_EQ(*ParseDeviceMemoryProtection("auto"), DeviceMemoryProtection::kAuto);
  EXPECT_EQ(*ParseDeviceMemoryProtection("1"), DeviceMemoryProtection::kOn);
  const Result<DeviceMemoryProtection> bad = ParseDeviceMemoryProtection("maybe");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("expected on, off or auto"));
  EXPECT_EQ(DeviceMemoryProtectionName(DeviceMemoryProtection::kAuto), "auto");
}

TEST(DeviceMemoryProtectionMode, EnvironmentOverridesTheRequest) {
  {
    ScopedEnv env(kDeviceProtectEnvVar, "off");
    ASSERT_DEVICE_OK_AND_ASSIGN(auto device,
                                CpuDevice::Create(0, kMiB, DeviceMemoryProtection::kOn));
    EXPECT_FALSE(device->memory_protected());
    EXPECT_EQ(device->protection().explanation, "off (SLUICE_DEVICE_PROTECT=off)");
    EXPECT_THAT(DescribeDeviceMemoryProtection(DeviceMemoryProtection::kOn),
                StartsWith("off (SLUICE_DEVICE_PROTECT=off)"));
  }
  {
    ScopedEnv env(kDeviceProtectEnvVar, "sometimes");
    const Result<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(0, kMiB);
    ASSERT_FALSE(device.ok());
    EXPECT_EQ(device.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(device.status().ToString(), HasSubstr("SLUICE_DEVICE_PROTECT=sometimes"));
    EXPECT_THAT(device.status().ToString(), HasSubstr("creating device cpu:0"));
  }
  {
    ScopedEnv env(kDeviceProtectEnvVar, nullptr);
    ASSERT_DEVICE_OK_AND_ASSIGN(auto device, CpuDevice::Create(0, kMiB));
    EXPECT_FALSE(device->memory_protected()) << "off is the default for now";
    EXPECT_EQ(device->protection().explanation, "off (requested off)");
  }
}

TEST(DeviceMemoryProtectionMode, AutoAndOnFollowTheMachine) {
  ScopedEnv env(kDeviceProtectEnvVar, nullptr);
  const Result<int> key = ProcessProtectionKey();
  ASSERT_DEVICE_OK_AND_ASSIGN(auto automatic,
                              CpuDevice::Create(0, kMiB, DeviceMemoryProtection::kAuto));
  EXPECT_EQ(automatic->memory_protected(), key.ok()) << automatic->protection().explanation;
  DeviceOptions options;
  options.memory_limit_bytes = kMiB;
  options.memory_protection = DeviceMemoryProtection::kOn;
  Result<std::unique_ptr<Device>> on = CreateDevice(options);
  if (key.ok()) {
    ASSERT_TRUE(on.ok()) << on.status().ToString();
    EXPECT_TRUE(static_cast<CpuDevice&>(**on).memory_protected());
    EXPECT_THAT(DescribeDeviceMemoryProtection(DeviceMemoryProtection::kOn),
                StartsWith(fmt::format("on (requested on): device memory carries protection key {}",
                                       *key)));
  } else {
    ASSERT_FALSE(on.ok());
    EXPECT_EQ(on.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(on.status().ToString(), HasSubstr("device memory protection is on"));
    EXPECT_THAT(DescribeDeviceMemoryProtection(DeviceMemoryProtection::kOn), StartsWith("error: "));
  }
}

// Overhead of protection on stream work: run with --gtest_also_run_disabled_tests.
// Each iteration enqueues one op; the stream is synchronized every kBatch ops.
TEST(DeviceMemoryProtectionOverhead, DISABLED_CopyAndHostFunctionThroughput) {
  if (!ProcessProtectionKey().ok()) GTEST_SKIP() << ProcessProtectionKey().status().ToString();
  ScopedEnv env(kDeviceProtectEnvVar, nullptr);
  const char* iterations_env = std::getenv("SLUICE_BENCH_ITERS");
  const int iterations = iterations_env != nullptr ? std::atoi(iterations_env) : 200000;
  constexpr int kBatch = 1000;
  using Clock = std::chrono::steady_clock;
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (DeviceMemoryProtection mode :
         {DeviceMemoryProtection::kOff, DeviceMemoryProtection::kOn}) {
      ASSERT_DEVICE_OK_AND_ASSIGN(auto device, CpuDevice::Create(0, 64 * kMiB, mode));
      ASSERT_DEVICE_OK_AND_ASSIGN(auto stream, device->CreateStream());
      for (size_t bytes : {size_t{256}, size_t{64} << 10}) {
        ASSERT_DEVICE_OK_AND_ASSIGN(DeviceBuffer d,
                                    device->Allocate(bytes, MemoryCategory::kBuffers));
        ASSERT_DEVICE_OK_AND_ASSIGN(PinnedBuffer h,
                                    device->AllocatePinnedHost(bytes, MemoryCategory::kBuffers));
        const int n = bytes > 4096 ? iterations / 4 : iterations;
        const auto start = Clock::now();
        for (int i = 0; i < n; ++i) {
          ASSERT_DEVICE_OK(device->CopyAsync(d.data(), h.data(), bytes, CopyKind::kH2D, *stream));
          if (i % kBatch == kBatch - 1) ASSERT_DEVICE_OK(stream->Synchronize());
        }
        ASSERT_DEVICE_OK(stream->Synchronize());
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        std::printf("protection %-3s CopyAsync H2D %6zu B: %9.0f copies/s (%.3f us each)\n",
                    std::string(DeviceMemoryProtectionName(mode)).c_str(), bytes, n / seconds,
                    seconds / n * 1e6);
      }
      const auto start = Clock::now();
      int counter = 0;
      for (int i = 0; i < iterations; ++i) {
        ASSERT_DEVICE_OK(device->LaunchHostFunc(*stream, [&counter] {
          ++counter;
          return OkStatus();
        }));
        if (i % kBatch == kBatch - 1) ASSERT_DEVICE_OK(stream->Synchronize());
      }
      ASSERT_DEVICE_OK(stream->Synchronize());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      EXPECT_EQ(counter, iterations);
      std::printf("protection %-3s LaunchHostFunc (empty):  %9.0f calls/s (%.3f us each)\n",
                  std::string(DeviceMemoryProtectionName(mode)).c_str(), iterations / seconds,
                  seconds / iterations * 1e6);
      // The worst case for the worker's grants: the queue runs dry after every task.
      const int round_trips = iterations / 20;
      const auto sync_start = Clock::now();
      for (int i = 0; i < round_trips; ++i) {
        ASSERT_DEVICE_OK(device->LaunchHostFunc(*stream, [] { return OkStatus(); }));
        ASSERT_DEVICE_OK(stream->Synchronize());
      }
      const double sync_seconds = std::chrono::duration<double>(Clock::now() - sync_start).count();
      std::printf(
          "protection %-3s LaunchHostFunc+Synchronize: %7.0f round trips/s (%.3f us each)\n",
          std::string(DeviceMemoryProtectionName(mode)).c_str(), round_trips / sync_seconds,
          sync_seconds / round_trips * 1e6);
    }
  }
  // The raw cost the worker adds per task: one grant and one restore of PKRU rights.
  const int pkey = *ProcessProtectionKey();
  const auto start = Clock::now();
  constexpr int kGrants = 1000000;
  for (int i = 0; i < kGrants; ++i) {
    ScopedDeviceAccess access(pkey);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ScopedDeviceAccess grant+restore: %.1f ns\n", seconds / kGrants * 1e9);
}

}  // namespace
}  // namespace sluice
