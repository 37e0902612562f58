#include "benchmarks/lib/gpu/bench_case.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "benchmarks/lib/bench_record.h"
#include "runtime/device/cuda/cuda_call.h"

namespace sluice::bench::gpu {
namespace {

// Long enough for any host to enqueue a sample's launches (at most a few dozen, microseconds
// each); a launcher that waits on the device makes the blocking kernel time out instead of
// deadlocking the benchmark.
constexpr uint64_t kBlockTimeoutNs = 200'000'000;

}  // namespace

Status FromLaunch(const kernels::cuda::LaunchStatus& status, const std::string& op) {
  if (status.ok()) return OkStatus();
  if (status.code() == kernels::cuda::LaunchStatus::Code::kInvalidArgument) {
    return InvalidArgumentError("{}: the launcher rejected its arguments: {}", op,
                                status.message());
  }
  return InternalError("{}: {}", op, status.message());
}

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, const std::string& what) {
  DeviceBuffer buffer;
  cudaError_t rc = cudaMalloc(&buffer.data_, bytes == 0 ? 1 : bytes);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for the next case
    return ResourceExhaustedError("cudaMalloc of {} bytes for {}: {}", bytes, what,
                                  internal::CudaErrorText(rc));
  }
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

Result<void*> CaseRun::Allocate(size_t bytes, const char* what) {
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(bytes, what));
  void* p = buffer.get();
  allocated_bytes_ += bytes;
  buffers_.push_back(std::move(buffer));
  return p;
}

Result<void*> CaseRun::Input(DType dtype, size_t count, float lo, float hi) {
  SLUICE_ASSIGN_OR_RETURN(void* p, Allocate(count * DTypeSize(dtype), "an input"));
  // Each array gets its own seed, so that no two inputs hold the same values.
  SLUICE_TRY_CUDA(FillUniform(p, dtype, count, lo, hi, seed_++, stream_));
  return p;
}

Result<void*> CaseRun::Upload(const void* data, size_t bytes) {
  SLUICE_ASSIGN_OR_RETURN(void* p, Allocate(bytes, "host data"));
  // Synchronous: `data` may go away when this returns.
  SLUICE_TRY_CUDA(cudaMemcpyAsync(p, data, bytes, cudaMemcpyHostToDevice, stream_));
  SLUICE_TRY_CUDA(cudaStreamSynchronize(stream_));
  return p;
}

Result<void*> CaseRun::Output(DType dtype, size_t count, float poison) {
  SLUICE_ASSIGN_OR_RETURN(void* p, Allocate(count * DTypeSize(dtype), "an output"));
  // Finite until the checked run poisons it, so that a launch enqueued by build() before the
  // check (attention's forward, feeding the backward) never reads NaN.
  SLUICE_TRY_CUDA(FillConstant(p, dtype, count, 0.0f, stream_));
  checked_.push_back({p, dtype, count, poison, true});
  return p;
}

Result<void*> CaseRun::InOut(DType dtype, size_t count, float lo, float hi) {
  SLUICE_ASSIGN_OR_RETURN(void* p, Input(dtype, count, lo, hi));
  checked_.push_back({p, dtype, count, 0.0f, false});
  return p;
}

Result<int32_t*> CaseRun::ErrorFlag() {
  SLUICE_ASSIGN_OR_RETURN(void* p, Allocate(sizeof(int32_t), "an error flag"));
  SLUICE_TRY_CUDA(cudaMemsetAsync(p, 0, sizeof(int32_t), stream_));
  flags_.push_back(static_cast<int32_t*>(p));
  return static_cast<int32_t*>(p);
}

Result<void*> CaseRun::Scratch(size_t bytes) {
  SLUICE_ASSIGN_OR_RETURN(void* p, Allocate(bytes, "a workspace"));
  SLUICE_TRY_CUDA(cudaMemsetAsync(p, 0, bytes == 0 ? 1 : bytes, stream_));
  return p;
}

Result<CaseRun::CheckResult> CaseRun::RunChecked(const std::string& op) {
  for (const Checked& c : checked_) {
    if (c.poisoned) SLUICE_TRY_CUDA(FillConstant(c.data, c.dtype, c.count, c.poison, stream_));
  }
  for (int32_t* flag : flags_) SLUICE_TRY_CUDA(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream_));
  for (const Launch& launch : launches_) SLUICE_RETURN_IF_ERROR(FromLaunch(launch(stream_), op));
  SLUICE_ASSIGN_OR_RETURN(void* counter, Allocate(sizeof(unsigned long long), "a counter"));
  SLUICE_TRY_CUDA(cudaMemsetAsync(counter, 0, sizeof(unsigned long long), stream_));
  CheckResult result;
  for (const Checked& c : checked_) {
    SLUICE_TRY_CUDA(CountNonFinite(c.data, c.dtype, c.count,
                                   static_cast<unsigned long long*>(counter), stream_));
    result.checked_elements += c.count;
  }
  unsigned long long non_finite = 0;
  SLUICE_TRY_CUDA(
      cudaMemcpyAsync(&non_finite, counter, sizeof(non_finite), cudaMemcpyDeviceToHost, stream_));
  std::vector<int32_t> flags(flags_.size(), 0);
  for (size_t i = 0; i < flags_.size(); ++i) {
    SLUICE_TRY_CUDA(
        cudaMemcpyAsync(&flags[i], flags_[i], sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  }
  // Errors of the op's kernels themselves (an illegal address) surface here.
  SLUICE_TRY_CUDA(cudaStreamSynchronize(stream_));
  result.non_finite = non_finite;
  for (int32_t flag : flags) result.raised_flags += flag != 0 ? 1 : 0;
  return result;
}

Result<std::unique_ptr<SampleTimer>> SampleTimer::Create(cudaStream_t stream) {
  std::unique_ptr<SampleTimer> timer(new SampleTimer());
  timer->stream_ = stream;
  SLUICE_TRY_CUDA(cudaEventCreate(&timer->start_));
  SLUICE_TRY_CUDA(cudaEventCreate(&timer->stop_));
  void* host = nullptr;
  // [0]: the release flag the host raises; [1]: the timed-out flag the blocking kernel raises.
  SLUICE_TRY_CUDA(cudaHostAlloc(&host, 2 * sizeof(int), cudaHostAllocMapped));
  std::memset(host, 0, 2 * sizeof(int));
  timer->release_ = static_cast<volatile int*>(host);
  void* device = nullptr;
  SLUICE_TRY_CUDA(cudaHostGetDevicePointer(&device, host, 0));
  timer->device_flags_ = static_cast<int*>(device);
  return timer;
}

SampleTimer::~SampleTimer() {
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
  if (release_ != nullptr) cudaFreeHost(const_cast<int*>(release_));
}

Status SampleTimer::RunLaunches(const std::vector<Launch>& launches, const std::string& op) {
  for (const Launch& launch : launches) SLUICE_RETURN_IF_ERROR(FromLaunch(launch(stream_), op));
  return OkStatus();
}

Result<double> SampleTimer::Sample(const std::vector<Launch>& launches, bool block,
                                   const std::string& op, bool* timed_out) {
  *timed_out = false;
  if (block) {
    release_[0] = 0;
    release_[1] = 0;
    SLUICE_TRY_CUDA(
        LaunchBlockingKernel(device_flags_, device_flags_ + 1, kBlockTimeoutNs, stream_));
  }
  // Whatever fails below, the blocking kernel is released at once rather than at its timeout.
  struct Release {
    volatile int* flag;
    ~Release() { flag[0] = 1; }
  };
  {
    Release release{release_};
    SLUICE_TRY_CUDA(cudaEventRecord(start_, stream_));
    SLUICE_RETURN_IF_ERROR(RunLaunches(launches, op));
    SLUICE_TRY_CUDA(cudaEventRecord(stop_, stream_));
  }
  SLUICE_TRY_CUDA(cudaEventSynchronize(stop_));
  if (block && release_[1] != 0) *timed_out = true;
  float ms = 0;
  SLUICE_TRY_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
  return 1e-3 * ms;
}

Result<SampleTimer::Timing> SampleTimer::Time(const std::vector<Launch>& launches, int warmup,
                                              int repeats, const std::string& op) {
  Timing timing;
  timing.launches_per_sample = static_cast<int>(launches.size());
  if (launches.empty()) return InternalError("{}: no launches to time", op);
  for (int i = 0; i < warmup; ++i) SLUICE_RETURN_IF_ERROR(RunLaunches(launches, op));
  SLUICE_TRY_CUDA(cudaStreamSynchronize(stream_));
  bool block = true;
  for (int i = 0; i < repeats; ++i) {
    bool timed_out = false;
    SLUICE_ASSIGN_OR_RETURN(double seconds, Sample(launches, block, op, &timed_out));
    if (timed_out) {
      // The host could not enqueue the sample while the blocking kernel ran: some launcher
      // waits on the device. Start over without the blocking kernel.
      block = false;
      timing.unblocked = true;
      timing.samples_seconds.clear();
      i = -1;
      continue;
    }
    timing.samples_seconds.push_back(seconds / static_cast<double>(launches.size()));
  }
  timing.median_seconds = Median(timing.samples_seconds);
  return timing;
}

}  // namespace sluice::bench::gpu
