#include "runtime/device/cuda/cuda_device.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "runtime/device/cuda/cuda_call.h"
#include "runtime/device/cuda/cuda_event.h"
#include "runtime/logging.h"
#include "runtime/size_format.h"

namespace sluice {
namespace {

cudaMemcpyKind ToCuda(CopyKind kind) {
  switch (kind) {
    case CopyKind::kH2D:
      return cudaMemcpyHostToDevice;
    case CopyKind::kD2H:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kD2D:
      return cudaMemcpyDeviceToDevice;
    case CopyKind::kH2H:
      return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

void LogIfFailed(cudaError_t error, std::string_view call) {
  if (error != cudaSuccess) {
    SLUICE_LOG(kError, "device", "{} failed: {}", call, internal::CudaErrorText(error));
  }
}

// What cudaLaunchHostFunc runs: the user's function, unless the stream already failed.
struct HostCall {
  std::function<Status()> fn;
  std::shared_ptr<CudaStreamState> state;
  std::string name;
  uint64_t launch = 0;
};

void CUDART_CB RunHostCall(void* data) {
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
  {
    std::lock_guard<std::mutex> lock(call->state->mu);
    if (!call->state->host_error.ok()) return;  // sticky: later work is skipped
  }
  Status status;
  try {
    status = call->fn();
  } catch (const std::exception& e) {
    status = InternalError("threw an exception: {}", e.what());
  } catch (...) {
    status = InternalError("threw an exception that is not a std::exception");
  }
  if (status.ok()) return;
  status.WithContext(
      fmt::format("stream {}, host function {} ({})", call->state->name, call->launch, call->name));
  std::lock_guard<std::mutex> lock(call->state->mu);
  if (call->state->host_error.ok()) {
    call->state->host_error = std::move(status);
    call->state->host_error_launch = call->launch;
  }
}

}  // namespace

Result<std::unique_ptr<CudaDevice>> CudaDevice::Create(int index, uint64_t memory_limit_bytes) {
  int count = 0;
  if (cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
    return UnavailableError("device cuda:{} requested but no CUDA GPU is usable: {}", index,
                            internal::CudaErrorText(error));
  }
  if (index < 0 || index >= count) {
    return UnavailableError("device cuda:{} requested but {} CUDA GPU(s) are visible", index,
                            count);
  }
  SLUICE_TRY_CUDA(cudaSetDevice(index));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  SLUICE_TRY_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  uint64_t capacity = total_bytes;
  if (memory_limit_bytes != 0 && memory_limit_bytes < capacity) capacity = memory_limit_bytes;
  capacity &= ~static_cast<uint64_t>(kDeviceAlignment - 1);
  if (capacity == 0) {
    return InvalidArgumentError("device.memory_limit of {} bytes is below the {}-byte minimum",
                                memory_limit_bytes, kDeviceAlignment);
  }
  // Let the stream-ordered pool keep up to the capacity mapped instead of returning memory to
  // the driver at every synchronization.
  cudaMemPool_t pool = nullptr;
  SLUICE_TRY_CUDA(cudaDeviceGetDefaultMemPool(&pool, index));
  uint64_t threshold = capacity;
  SLUICE_TRY_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  cudaDeviceProp properties{};
  SLUICE_TRY_CUDA(cudaGetDeviceProperties(&properties, index));
  std::unique_ptr<CudaDevice> device(new CudaDevice(index, capacity));
  device->set_product(properties.name);
  return device;
}

CudaDevice::CudaDevice(int index, uint64_t capacity)
    : Device(DeviceKind::kCuda, index), capacity_(capacity) {}

CudaDevice::~CudaDevice() {
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    SLUICE_CHECK(streams_.empty()) << "device " << name() << " destroyed with " << streams_.size()
                                   << " streams alive: destroy every Stream before its Device";
  }
  SLUICE_CHECK(used_.load() == 0) << "device " << name() << " destroyed with "
                                  << FormatBytes(used_.load())
                                  << " in DeviceBuffers: destroy them before their Device";
  SLUICE_CHECK(live_pinned_buffers_.load() == 0)
      << "device " << name() << " destroyed with " << live_pinned_buffers_.load()
      << " PinnedBuffers alive: destroy every PinnedBuffer before its Device";
}

Status CudaDevice::MakeCurrent() const {
  SLUICE_TRY_CUDA(cudaSetDevice(index()));
  return OkStatus();
}

CudaStream& CudaDevice::StreamOf(Stream& stream) const {
  SLUICE_CHECK(&stream.device() == this)
      << "stream " << stream.name() << " used with device " << name();
  return static_cast<CudaStream&>(stream);
}

Status CudaDevice::Reserve(size_t bytes, size_t reserved, MemoryCategory category) {
  uint64_t used = used_.load();
  do {
    if (reserved > capacity_ || used > capacity_ - reserved) {
      return DeviceMemoryExhaustedError(*this, bytes, category, used, capacity_, "");
    }
  } while (!used_.compare_exchange_weak(used, used + reserved));
  return OkStatus();
}

Result<DeviceBuffer> CudaDevice::Allocate(size_t bytes, MemoryCategory category) {
  if (bytes == 0) return DeviceBuffer();
  const size_t reserved = AlignUp(bytes, kDeviceAlignment);
  SLUICE_RETURN_IF_ERROR(Reserve(bytes, reserved, category));
  void* data = nullptr;
  cudaError_t error = cudaSetDevice(index());
  if (error == cudaSuccess) error = cudaMalloc(&data, reserved);
  if (error != cudaSuccess) {
    Unreserve(reserved);
    if (error == cudaErrorMemoryAllocation) {
      return DeviceMemoryExhaustedError(*this, bytes, category, used_.load(), capacity_,
                                        "cudaMalloc: GPU memory used outside Sluice's count");
    }
    return internal::ForeignCallError("CUDA", "cudaMalloc(&data, reserved)",
                                      internal::CudaErrorText(error), __FILE__, __LINE__);
  }
  return MakeDeviceBuffer(data, bytes, reserved, 0, category);
}

Result<DeviceBuffer> CudaDevice::AllocateAsync(size_t bytes, MemoryCategory category,
                                               Stream& stream) {
  CudaStream& cuda_stream = StreamOf(stream);
  if (bytes == 0) return DeviceBuffer();
  const size_t reserved = AlignUp(bytes, kDeviceAlignment);
  SLUICE_RETURN_IF_ERROR(Reserve(bytes, reserved, category));
  void* data = nullptr;
  const cudaError_t error = cudaMallocAsync(&data, reserved, cuda_stream.stream());
  if (error != cudaSuccess) {
    Unreserve(reserved);
    if (error == cudaErrorMemoryAllocation) {
      return DeviceMemoryExhaustedError(*this, bytes, category, used_.load(), capacity_,
                                        "cudaMallocAsync: GPU memory used outside Sluice's count");
    }
    return internal::ForeignCallError("CUDA", "cudaMallocAsync(&data, reserved, stream)",
                                      internal::CudaErrorText(error), __FILE__, __LINE__);
  }
  return MakeDeviceBuffer(data, bytes, reserved, stream.id(), category);
}

// Whole pages mapped here and page-locked by cudaHostRegister rather than cudaHostAlloc, which
// hands small requests out of a pool at 512-byte alignment: pinned buffers are also O_DIRECT
// I/O buffers (NVMe swap, checkpoints), which need 4096-byte alignment, as on the CPU backend.
Result<PinnedBuffer> CudaDevice::AllocatePinnedHost(size_t bytes, MemoryCategory category) {
  if (bytes == 0) return PinnedBuffer();
  SLUICE_RETURN_IF_ERROR(MakeCurrent());
  const size_t mapped = AlignUp(bytes, 4096);
  void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return ResourceExhaustedError("cannot map {} of host memory to pin: {}", FormatBytes(bytes),
                                  std::strerror(errno));
  }
  const cudaError_t error = cudaHostRegister(data, mapped, cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    munmap(data, mapped);
    if (error == cudaErrorMemoryAllocation) {
      return ResourceExhaustedError("cannot pin {} of host memory: {}", FormatBytes(bytes),
                                    internal::CudaErrorText(error));
    }
    return internal::ForeignCallError("CUDA", "cudaHostRegister(data, bytes, Portable)",
                                      internal::CudaErrorText(error), __FILE__, __LINE__);
  }
  ++live_pinned_buffers_;
  return MakePinnedBuffer(data, bytes, mapped, /*page_locked=*/true, category);
}

Result<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  SLUICE_RETURN_IF_ERROR(MakeCurrent());
  cudaStream_t stream = nullptr;
  SLUICE_TRY_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::unique_ptr<Stream>(std::make_unique<CudaStream>(*this, stream));
}

Result<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  SLUICE_RETURN_IF_ERROR(MakeCurrent());
  cudaEvent_t event = nullptr;
  SLUICE_TRY_CUDA(cudaEventCreateWithFlags(&event, cudaEventBlockingSync));
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(*this, event));
}

Status CudaDevice::CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                             Stream& stream) {
  CudaStream& cuda_stream = StreamOf(stream);
  if (bytes == 0) return OkStatus();
  SLUICE_TRY_CUDA(cudaMemcpyAsync(dst, src, bytes, ToCuda(kind), cuda_stream.stream()));
  return OkStatus();
}

Status CudaDevice::Copy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                               size_t width, size_t height, CopyKind kind, Stream& stream) {
  CudaStream& cuda_stream = StreamOf(stream);
  if (width == 0 || height == 0) return OkStatus();
  SLUICE_TRY_CUDA(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, ToCuda(kind),
                                    cuda_stream.stream()));
  return OkStatus();
}

Status CudaDevice::MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) {
  CudaStream& cuda_stream = StreamOf(stream);
  if (bytes == 0) return OkStatus();
  SLUICE_TRY_CUDA(cudaMemsetAsync(dst, value, bytes, cuda_stream.stream()));
  return OkStatus();
}

Status CudaDevice::LaunchHostFunc(Stream& stream, std::function<Status()> fn,
                                  std::string_view name) {
  SLUICE_CHECK(fn != nullptr) << "LaunchHostFunc without a function";
  CudaStream& cuda_stream = StreamOf(stream);
  auto call = std::make_unique<HostCall>();
  call->fn = std::move(fn);
  call->state = cuda_stream.state();
  call->name = std::string(name);
  {
    std::lock_guard<std::mutex> lock(call->state->mu);
    call->launch = ++call->state->launches;
  }
  SLUICE_TRY_CUDA(cudaLaunchHostFunc(cuda_stream.stream(), RunHostCall, call.get()));
  call.release();  // RunHostCall owns it now
  return OkStatus();
}

Status CudaDevice::Synchronize() {
  SLUICE_RETURN_IF_ERROR(MakeCurrent());
  SLUICE_TRY_CUDA(cudaDeviceSynchronize());
  std::vector<std::shared_ptr<CudaStreamState>> states;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (const auto& [id, weak] : streams_) {
      if (auto state = weak.lock()) states.push_back(std::move(state));
    }
  }
  for (const auto& state : states) {
    SLUICE_RETURN_IF_ERROR(state->HostErrorUpTo(UINT64_MAX));
  }
  return OkStatus();
}

DeviceMemoryInfo CudaDevice::MemoryInfo() const {
  const uint64_t used = used_.load();
  return DeviceMemoryInfo{capacity_, used, capacity_ - used, capacity_ - used};
}

void CudaDevice::RegisterStream(uint64_t id, std::weak_ptr<CudaStreamState> state) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.emplace(id, std::move(state));
}

void CudaDevice::UnregisterStream(uint64_t id) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.erase(id);
}

void CudaDevice::FreeDeviceMemory(void* data, size_t reserved, uint64_t stream_id) {
  std::shared_ptr<CudaStreamState> state;
  if (stream_id != 0) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    auto it = streams_.find(stream_id);
    if (it != streams_.end()) state = it->second.lock();
  }
  if (stream_id == 0) {
    LogIfFailed(cudaFree(data), "cudaFree");
  } else {
    // Stream-ordered memory goes back to the pool on its stream; if the stream is gone its work
    // has finished (its destructor synchronized), and the legacy stream frees it in order.
    cudaStream_t stream = nullptr;
    std::unique_lock<std::mutex> lock;
    if (state != nullptr) {
      lock = std::unique_lock<std::mutex>(state->mu);
      stream = state->stream;
    }
    LogIfFailed(cudaFreeAsync(data, stream), "cudaFreeAsync");
  }
  Unreserve(reserved);
}

void CudaDevice::FreeDeviceMemoryAsync(void* data, size_t reserved, Stream& stream) {
  LogIfFailed(cudaFreeAsync(data, StreamOf(stream).stream()), "cudaFreeAsync");
  Unreserve(reserved);
}

void CudaDevice::FreePinnedMemory(void* data, size_t reserved) {
  LogIfFailed(cudaHostUnregister(data), "cudaHostUnregister");
  munmap(data, reserved);
  --live_pinned_buffers_;
}

}  // namespace sluice
