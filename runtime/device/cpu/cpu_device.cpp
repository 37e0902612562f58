#include "runtime/device/cpu/cpu_device.h"

#include <cstring>
#include <utility>
#include <vector>

#include "runtime/device/cpu/cpu_event.h"
#include "runtime/device/cpu/cpu_stream.h"
#include "runtime/device/cpu/cpu_stream_queue.h"
#include "runtime/device/cpu/pinned_host_memory.h"
#include "runtime/logging.h"
#include "runtime/size_format.h"
#include "runtime/trace.h"

namespace sluice {

Result<std::unique_ptr<CpuDevice>> CpuDevice::Create(int index, uint64_t memory_limit_bytes,
                                                     DeviceMemoryProtection protection) {
  if (index < 0) return InvalidArgumentError("cpu device index {} is negative", index);
  const uint64_t capacity = memory_limit_bytes & ~static_cast<uint64_t>(kDeviceAlignment - 1);
  if (capacity == 0) {
    return InvalidArgumentError(
        "device.memory_limit is {} bytes: the cpu device needs a capacity of at least {} bytes, "
        "e.g. \"8GiB\"",
        memory_limit_bytes, kDeviceAlignment);
  }
  Result<DeviceProtectionDecision> decision = DecideDeviceMemoryProtection(protection);
  if (!decision.ok()) {
    return Status(decision.status()).WithContext(fmt::format("creating device cpu:{}", index));
  }
  if (decision->requested == DeviceMemoryProtection::kAuto && !decision->active) {
    SLUICE_LOG_ONCE(kInfo, "device", "device memory protection is {}", decision->explanation);
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<CpuArena> arena,
                          CpuArena::Create(capacity, kDeviceAlignment));
  std::unique_ptr<DeviceMemoryGuard> guard;
  if (decision->active) {
    Result<std::unique_ptr<DeviceMemoryGuard>> created =
        DeviceMemoryGuard::Create(index, decision->pkey, arena->base(), arena->capacity());
    if (!created.ok()) {
      return Status(created.status()).WithContext(fmt::format("creating device cpu:{}", index));
    }
    guard = std::move(created).value();
  }
  return std::unique_ptr<CpuDevice>(
      new CpuDevice(index, std::move(arena), std::move(decision).value(), std::move(guard)));
}

CpuDevice::CpuDevice(int index, std::unique_ptr<CpuArena> arena,
                     DeviceProtectionDecision protection, std::unique_ptr<DeviceMemoryGuard> guard)
    : Device(DeviceKind::kCpu, index),
      arena_(std::move(arena)),
      protection_(std::move(protection)),
      guard_(std::move(guard)) {}

CpuDevice::~CpuDevice() {
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    SLUICE_CHECK(streams_.empty()) << "device " << name() << " destroyed with " << streams_.size()
                                   << " streams alive: destroy every Stream before its Device";
  }
  const CpuArena::Stats stats = arena_->stats();
  // Memory freed on a stream after it failed stays reserved to the end (FreeOnQueue).
  SLUICE_CHECK(stats.used == stats.abandoned)
      << "device " << name() << " destroyed with " << stats.allocated_blocks
      << " DeviceBuffers alive (" << FormatBytes(stats.used)
      << "): destroy every DeviceBuffer before its Device";
  SLUICE_CHECK(live_pinned_buffers_.load() == 0)
      << "device " << name() << " destroyed with " << live_pinned_buffers_.load()
      << " PinnedBuffers alive: destroy every PinnedBuffer before its Device";
}

CpuStreamQueue& CpuDevice::QueueOf(Stream& stream) const {
  SLUICE_CHECK(&stream.device() == this)
      << "stream " << stream.name() << " used with device " << name();
  return static_cast<CpuStream&>(stream).queue();
}

Result<DeviceBuffer> CpuDevice::AllocateOnArena(size_t bytes, MemoryCategory category,
                                                uint64_t stream_id) {
  if (bytes == 0) return DeviceBuffer();
  void* data = arena_->Allocate(bytes, stream_id);
  if (data == nullptr && !OnCpuStreamWorker() && arena_->stats().pending > 0) {
    // The host ran ahead of frees still queued on streams: wait for them, as a CUDA caching
    // allocator synchronizes before it gives up. A host wait, but only when memory is short.
    ScopedTraceEvent wait(kTraceLaneHostWait, "allocation waits for stream-ordered frees", bytes);
    data = arena_->AllocateAfterPendingFrees(bytes, stream_id);
  }
  if (data == nullptr) {
    const CpuArena::Stats stats = arena_->stats();
    std::string detail =
        fmt::format("largest free block {}", FormatBytes(stats.largest_free_block));
    if (stats.pending > 0) {
      detail += fmt::format(", {} waiting for stream-ordered frees", FormatBytes(stats.pending));
    }
    return DeviceMemoryExhaustedError(*this, bytes, category, stats.used, stats.capacity, detail);
  }
  const size_t reserved = AlignUp(bytes, kDeviceAlignment);
  // The fault report names the buffer a host thread touched from this table.
  if (guard_ != nullptr) guard_->RecordAllocation(data, bytes, reserved, category, stream_id);
  return MakeDeviceBuffer(data, bytes, reserved, stream_id, category);
}

Result<DeviceBuffer> CpuDevice::Allocate(size_t bytes, MemoryCategory category) {
  return AllocateOnArena(bytes, category, 0);
}

Result<DeviceBuffer> CpuDevice::AllocateAsync(size_t bytes, MemoryCategory category,
                                              Stream& stream) {
  QueueOf(stream);  // checks that the stream is ours
  return AllocateOnArena(bytes, category, stream.id());
}

Result<PinnedBuffer> CpuDevice::AllocatePinnedHost(size_t bytes, MemoryCategory category) {
  if (bytes == 0) return PinnedBuffer();
  SLUICE_ASSIGN_OR_RETURN(PinnedRegion region, MapPinnedHostMemory(bytes));
  ++live_pinned_buffers_;
  return MakePinnedBuffer(region.data, bytes, region.length, region.locked, category);
}

Result<std::unique_ptr<Stream>> CpuDevice::CreateStream() {
  return std::unique_ptr<Stream>(std::make_unique<CpuStream>(*this));
}

Result<std::unique_ptr<Event>> CpuDevice::CreateEvent() {
  return std::unique_ptr<Event>(std::make_unique<CpuEvent>(*this));
}

Status CpuDevice::CheckRange(const void* pointer, size_t bytes, bool device_side,
                             std::string_view what, std::string_view operation) const {
  if (pointer == nullptr) {
    return InvalidArgumentError("{} on {}: {} is null", operation, name(), what);
  }
  if (device_side) {
    if (!arena_->Contains(pointer, bytes)) {
      return InvalidArgumentError("{} on {}: {} {} ({} bytes) is not memory of this device",
                                  operation, name(), what, pointer, bytes);
    }
  } else {
    const char* p = static_cast<const char*>(pointer);
    const char* base = arena_->base();
    if (p < base + arena_->capacity() && base < p + bytes) {
      return InvalidArgumentError(
          "{} on {}: {} {} ({} bytes) is device memory, not host memory; use the right CopyKind",
          operation, name(), what, pointer, bytes);
    }
  }
  return OkStatus();
}

Status CpuDevice::CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                            Stream& stream) {
  CpuStreamQueue& queue = QueueOf(stream);
  if (bytes == 0) return OkStatus();
  const std::string operation =
      fmt::format("CopyAsync {} {}", CopyKindName(kind), FormatBytes(bytes));
  const bool dst_device = kind == CopyKind::kH2D || kind == CopyKind::kD2D;
  const bool src_device = kind == CopyKind::kD2H || kind == CopyKind::kD2D;
  SLUICE_RETURN_IF_ERROR(CheckRange(dst, bytes, dst_device, "dst", operation));
  SLUICE_RETURN_IF_ERROR(CheckRange(src, bytes, src_device, "src", operation));
  if (!queue.Enqueue(operation, [dst, src, bytes] {
        std::memcpy(dst, src, bytes);
        return OkStatus();
      })) {
    return FailedPreconditionError("{} on stream {}, which is shut down", operation, stream.name());
  }
  return OkStatus();
}

Status CpuDevice::Copy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width, size_t height, CopyKind kind, Stream& stream) {
  CpuStreamQueue& queue = QueueOf(stream);
  if (width == 0 || height == 0) return OkStatus();
  const std::string operation =
      fmt::format("Copy2DAsync {} {} rows of {}", CopyKindName(kind), height, FormatBytes(width));
  if (dst_pitch < width || src_pitch < width) {
    return InvalidArgumentError("{} on {}: pitches (dst {}, src {}) must be at least the width {}",
                                operation, name(), dst_pitch, src_pitch, width);
  }
  const bool dst_device = kind == CopyKind::kH2D || kind == CopyKind::kD2D;
  const bool src_device = kind == CopyKind::kD2H || kind == CopyKind::kD2D;
  SLUICE_RETURN_IF_ERROR(
      CheckRange(dst, (height - 1) * dst_pitch + width, dst_device, "dst", operation));
  SLUICE_RETURN_IF_ERROR(
      CheckRange(src, (height - 1) * src_pitch + width, src_device, "src", operation));
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (!queue.Enqueue(operation, [=] {
        for (size_t r = 0; r < height; ++r)
          std::memcpy(d + r * dst_pitch, s + r * src_pitch, width);
        return OkStatus();
      })) {
    return FailedPreconditionError("{} on stream {}, which is shut down", operation, stream.name());
  }
  return OkStatus();
}

Status CpuDevice::MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) {
  CpuStreamQueue& queue = QueueOf(stream);
  if (bytes == 0) return OkStatus();
  const std::string operation = fmt::format("MemsetAsync {}", FormatBytes(bytes));
  SLUICE_RETURN_IF_ERROR(CheckRange(dst, bytes, /*device_side=*/true, "dst", operation));
  if (!queue.Enqueue(operation, [dst, value, bytes] {
        std::memset(dst, value, bytes);
        return OkStatus();
      })) {
    return FailedPreconditionError("{} on stream {}, which is shut down", operation, stream.name());
  }
  return OkStatus();
}

Status CpuDevice::LaunchHostFunc(Stream& stream, std::function<Status()> fn,
                                 std::string_view name) {
  SLUICE_CHECK(fn != nullptr) << "LaunchHostFunc without a function";
  if (!QueueOf(stream).Enqueue(std::string(name), std::move(fn))) {
    return FailedPreconditionError("LaunchHostFunc '{}' on stream {}, which is shut down", name,
                                   stream.name());
  }
  return OkStatus();
}

Status CpuDevice::Synchronize() {
  std::vector<std::shared_ptr<CpuStreamQueue>> queues;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (const auto& [id, weak] : streams_) {
      if (auto queue = weak.lock()) queues.push_back(std::move(queue));
    }
  }
  Status first_error;
  for (const auto& queue : queues) {
    Status status = queue->Synchronize();
    if (!status.ok() && first_error.ok()) first_error = std::move(status);
  }
  return first_error;
}

DeviceMemoryInfo CpuDevice::MemoryInfo() const {
  const CpuArena::Stats stats = arena_->stats();
  return DeviceMemoryInfo{stats.capacity, stats.used, stats.capacity - stats.used,
                          stats.largest_free_block};
}

void CpuDevice::RegisterStream(uint64_t id, std::weak_ptr<CpuStreamQueue> queue) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.emplace(id, std::move(queue));
}

void CpuDevice::UnregisterStream(uint64_t id) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.erase(id);
}

void CpuDevice::FreeOnQueue(void* data, CpuStreamQueue& queue, uint64_t stream_id) {
  const uint64_t ticket = arena_->FreeLater(data, stream_id);
  CpuArena* arena = arena_.get();
  // A stream that failed first keeps the memory: the failed work (a timed-out collective that
  // stays posted) may still write into it.
  const bool enqueued = queue.EnqueueBookkeeping([arena, ticket](const Status& sticky) {
    if (sticky.ok()) {
      arena->CompleteFree(ticket);
    } else {
      arena->AbandonFree(ticket);
    }
  });
  if (!enqueued) {
    arena_->CompleteFree(ticket);  // the stream is shut down: its work is finished
  }
}

void CpuDevice::FreeDeviceMemory(void* data, size_t reserved, uint64_t stream_id) {
  if (guard_ != nullptr) guard_->ForgetAllocation(data);
  std::shared_ptr<CpuStreamQueue> queue;
  if (stream_id != 0) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    auto it = streams_.find(stream_id);
    if (it != streams_.end()) queue = it->second.lock();
  }
  if (queue != nullptr) {
    FreeOnQueue(data, *queue, stream_id);
  } else {
    arena_->Free(data);
  }
}

void CpuDevice::FreeDeviceMemoryAsync(void* data, size_t reserved, Stream& stream) {
  if (guard_ != nullptr) guard_->ForgetAllocation(data);
  FreeOnQueue(data, QueueOf(stream), stream.id());
}

void CpuDevice::FreePinnedMemory(void* data, size_t reserved) {
  UnmapPinnedHostMemory(data, reserved);
  --live_pinned_buffers_;
}

}  // namespace sluice
