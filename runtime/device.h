// Device: memory, pinned host memory, streams, events and asynchronous copies with CUDA
// semantics. Two backends implement it (runtime/device/cpu, runtime/device/cuda); create one with
// CreateDevice() from runtime/device/device_factory.h.
//
// The contract, shared by both backends:
// - Work on a Stream (copies, memsets, host functions, event records, stream-ordered frees) runs
//   asynchronously, in the order it was enqueued. Nothing orders two streams except events:
//   `event.Record(a); b.WaitEvent(event);` makes b's later work wait for a's earlier work,
//   without blocking the host.
// - Stream::WaitEvent captures the event's latest record at the time of the call; recording the
//   event again later does not affect waits already enqueued; waiting on an event that was never
//   recorded is a no-op (as cudaStreamWaitEvent).
// - An error in stream work (a host function returning a Status, an exception it threw) is
//   sticky: later work on that stream is skipped, and the error, with the failing task named, is
//   returned by every later Stream::Synchronize / Query, by Device::Synchronize, and by the
//   Synchronize / Query of events recorded on that stream after it. On the CPU backend a stream
//   that waits on such an event takes the error over too.
// - Device memory is bounded by a capacity (`device.memory_limit`); an allocation past it fails
//   with ResourceExhausted naming the request, what is in use, and the limit. Allocations are
//   256-byte aligned and charged to the memory ledger (runtime/memory_accounting.h): device
//   buffers as tier `device`, pinned buffers as `host_pinned`.
// - A buffer's memory must not be freed while enqueued work still uses it: synchronize first, or
//   free it on the stream that last uses it (DeviceBuffer::FreeAsync), as with cudaFreeAsync.
// - Every Stream, Event, DeviceBuffer and PinnedBuffer must be destroyed before its Device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/memory_accounting.h"
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice {

enum class DeviceKind : uint8_t { kCpu = 0, kCuda };
std::string_view DeviceKindName(DeviceKind kind);  // "cpu", "cuda"
Result<DeviceKind> ParseDeviceKind(std::string_view name);

// Direction of a copy: host (pageable or pinned) and device memory, as cudaMemcpyKind.
enum class CopyKind : uint8_t { kH2D = 0, kD2H, kD2D, kH2H };
std::string_view CopyKindName(CopyKind kind);  // "H2D", ...

inline constexpr size_t kDeviceAlignment = 256;

class Device;
class Event;
class Stream;

// Device memory, freed when destroyed. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }  // bytes asked for (the reservation is 256-aligned)
  bool empty() const { return data_ == nullptr; }
  MemoryCategory category() const { return charge_.category(); }
  Device* device() const { return device_; }

  // Frees the memory on `stream` (cudaFreeAsync): it is reusable by other allocations once the
  // stream reaches this point, and by later AllocateAsync calls on the same stream at once. The
  // caller orders uses on other streams before it (events). Leaves the buffer empty. On a stream
  // that has failed by then (a sticky error) the memory is not reused at all, since the failed
  // work may still own it (on CUDA the failed context is gone anyway).
  //
  // Allocation when memory is short: an allocation by a host thread that finds no room while
  // frees are still queued on streams waits for the streams to reach them (as a CUDA caching
  // allocator synchronizes before it reports out of memory); a stream's own task never waits.
  void FreeAsync(Stream& stream);
  // Frees now; a buffer from AllocateAsync is freed on the stream it was allocated on (if that
  // stream is gone, its work has finished and the memory is freed at once).
  void Reset();

 private:
  friend class Device;
  DeviceBuffer(Device* device, void* data, size_t size, size_t reserved, uint64_t stream_id,
               MemoryCharge charge)
      : device_(device),
        data_(data),
        size_(size),
        reserved_(reserved),
        stream_id_(stream_id),
        charge_(std::move(charge)) {}

  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t reserved_ = 0;
  uint64_t stream_id_ = 0;  // allocation stream of AllocateAsync buffers, 0 otherwise
  MemoryCharge charge_;
};

// Page-locked host memory (cudaHostAlloc; on the CPU backend page-aligned and mlock'ed when the
// RLIMIT_MEMLOCK allows it), freed when destroyed. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Reset(); }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }
  // False when the CPU backend could not lock the pages (a warning was logged once).
  bool page_locked() const { return page_locked_; }
  MemoryCategory category() const { return charge_.category(); }
  Device* device() const { return device_; }

  void Reset();

 private:
  friend class Device;
  PinnedBuffer(Device* device, void* data, size_t size, size_t reserved, bool page_locked,
               MemoryCharge charge)
      : device_(device),
        data_(data),
        size_(size),
        reserved_(reserved),
        page_locked_(page_locked),
        charge_(std::move(charge)) {}

  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t reserved_ = 0;
  bool page_locked_ = false;
  MemoryCharge charge_;
};

// An in-order queue of asynchronous work on a device (cudaStream_t). Create with
// Device::CreateStream(); enqueue through the Device (CopyAsync, MemsetAsync, LaunchHostFunc,
// AllocateAsync, Event::Record, WaitEvent). Destroying a stream waits for its enqueued work.
class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const { return *device_; }
  uint64_t id() const { return id_; }  // unique in the process, never 0
  std::string name() const;            // "cpu:0/stream3"

  // Blocks the host (no busy spin) until all work enqueued so far has finished; returns the
  // stream's sticky error, if any. Calling it from a host function of this same stream is a
  // FailedPrecondition error (it would wait for itself).
  virtual Status Synchronize() = 0;
  // Later work on this stream waits for the event's latest record (see the contract above).
  virtual Status WaitEvent(const Event& event) = 0;
  // True when all enqueued work has finished; the sticky error if there is one.
  virtual Result<bool> Query() = 0;
  // cudaStream_t on CUDA (for NCCL, cuBLAS, kernel launches); the backend's queue on the CPU.
  virtual void* native() const = 0;

 protected:
  explicit Stream(Device& device);

 private:
  Device* device_;
  uint64_t id_;
};

// A point in a stream's work (cudaEvent_t). Create with Device::CreateEvent().
class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  Device& device() const { return *device_; }

  // Captures all work enqueued on `stream` so far; the event completes when that work finished.
  // Recording again moves the event to the new point.
  virtual Status Record(Stream& stream) = 0;
  // Blocks the host (no busy spin) until the latest record completed; returns the recording
  // stream's sticky error if it had one by then. OK at once when never recorded.
  virtual Status Synchronize() = 0;
  // True when the latest record completed (or the event was never recorded).
  virtual Result<bool> Query() = 0;

 protected:
  explicit Event(Device& device) : device_(&device) {}

  friend Result<float> ElapsedMs(const Event& start, const Event& end);
  // Milliseconds from `start`'s completion to this event's; both must have completed.
  virtual Result<float> ElapsedMsSince(const Event& start) const = 0;

 private:
  Device* device_;
};

// Milliseconds between two completed records (cudaEventElapsedTime). FailedPrecondition when an
// event was never recorded or has not completed yet, InvalidArgument for events of two devices.
Result<float> ElapsedMs(const Event& start, const Event& end);

struct DeviceMemoryInfo {
  uint64_t capacity = 0;  // device.memory_limit (CUDA: at most the GPU's memory)
  // Reserved by live buffers; on the CPU backend also by stream-ordered frees their stream has not
  // reached yet (on CUDA the pool keeps those apart from this count).
  uint64_t used = 0;
  uint64_t free = 0;  // capacity - used
  // Largest single allocation that would succeed now (CPU: the arena's largest free block;
  // CUDA: `free`, since the pool maps memory on demand).
  uint64_t largest_free_block = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  DeviceKind kind() const { return kind_; }
  int index() const { return index_; }
  const std::string& name() const { return name_; }  // "cpu:0", "cuda:1"
  // The hardware as its driver names it ("NVIDIA H100 80GB HBM3"); empty for the cpu device.
  const std::string& product() const { return product_; }

  // Device memory, usable by work on any stream at once. bytes == 0 gives an empty buffer.
  virtual Result<DeviceBuffer> Allocate(size_t bytes, MemoryCategory category) = 0;
  // Stream-ordered allocation (cudaMallocAsync): the memory may be used by work enqueued on
  // `stream` from now on (other streams: after an event). It may reuse memory whose
  // stream-ordered free on the same stream has not run yet. Destroying the buffer frees it on
  // `stream`.
  virtual Result<DeviceBuffer> AllocateAsync(size_t bytes, MemoryCategory category,
                                             Stream& stream) = 0;
  virtual Result<PinnedBuffer> AllocatePinnedHost(size_t bytes, MemoryCategory category) = 0;

  virtual Result<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual Result<std::unique_ptr<Event>> CreateEvent() = 0;

  // Enqueues a copy of `bytes` from src to dst. The pointers must match `kind` (device memory of
  // this device or host memory); a mismatch found at enqueue time is InvalidArgument.
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                           Stream& stream) = 0;
  // Enqueues a strided copy of `height` rows of `width` bytes (cudaMemcpy2DAsync): row r goes
  // from src + r * src_pitch to dst + r * dst_pitch. Pitches are at least `width`. How the
  // engine splits and merges column blocks of a row-major activation (a fused qkv projection)
  // without a kernel of its own.
  virtual Status Copy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                             size_t width, size_t height, CopyKind kind, Stream& stream) = 0;
  // Enqueues setting `bytes` of device memory at dst to the byte `value`.
  virtual Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) = 0;
  // Enqueues a host function; a non-OK Status (or an exception) becomes the stream's sticky error,
  // reported with `name`. On the CPU backend this is how kernels run on a stream. It must not
  // synchronize its own stream; on CUDA it must make no CUDA call at all, which includes the
  // destructors of what it captures (no DeviceBuffer captured by value).
  virtual Status LaunchHostFunc(Stream& stream, std::function<Status()> fn,
                                std::string_view name = "host function") = 0;

  // Blocks until the work of every stream of this device has finished; the first sticky error.
  virtual Status Synchronize() = 0;
  virtual DeviceMemoryInfo MemoryInfo() const = 0;

 protected:
  Device(DeviceKind kind, int index);
  void set_product(std::string product) { product_ = std::move(product); }

  // Backend hooks behind DeviceBuffer / PinnedBuffer.
  // Frees device memory now, or on the stream `stream_id` if it still exists (0: now).
  virtual void FreeDeviceMemory(void* data, size_t reserved, uint64_t stream_id) = 0;
  // Frees device memory on `stream` (DeviceBuffer::FreeAsync).
  virtual void FreeDeviceMemoryAsync(void* data, size_t reserved, Stream& stream) = 0;
  virtual void FreePinnedMemory(void* data, size_t reserved) = 0;

  // How backends hand out buffers; `reserved` is what they give back to the hooks above.
  DeviceBuffer MakeDeviceBuffer(void* data, size_t size, size_t reserved, uint64_t stream_id,
                                MemoryCategory category);
  PinnedBuffer MakePinnedBuffer(void* data, size_t size, size_t reserved, bool page_locked,
                                MemoryCategory category);

 private:
  friend class DeviceBuffer;
  friend class PinnedBuffer;

  DeviceKind kind_;
  int index_;
  std::string name_;
  std::string product_;
};

// Rounds up to a multiple of `alignment` (a power of two).
constexpr size_t AlignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

// The message of an allocation past the device's capacity:
// "device cpu:0: cannot allocate 12.00 MiB for params: 60.00 MiB of 64.00 MiB in use (largest free
// block 4.00 MiB); raise device.memory_limit or keep less on the device (smaller micro-batch,
// zero_optimization.offload_param / offload_optimizer)". `detail` goes inside the parentheses
// (omitted when empty).
Status DeviceMemoryExhaustedError(const Device& device, size_t bytes, MemoryCategory category,
                                  uint64_t used, uint64_t capacity, std::string_view detail);

}  // namespace sluice
