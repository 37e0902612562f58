// The CUDA device: the Device contract of runtime/device.h over the CUDA runtime. Stream-ordered
// memory comes from the device's default pool (cudaMallocAsync / cudaFreeAsync), pinned memory
// from whole pages locked by cudaHostRegister, host functions run through cudaLaunchHostFunc. The
// capacity is min(device.memory_limit, GPU memory) and is enforced by Sluice's own count of live
// allocations (the pool reuses freed memory by itself).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "runtime/device.h"
#include "runtime/device/cuda/cuda_stream.h"

namespace sluice {

class CudaDevice final : public Device {
 public:
  // memory_limit_bytes == 0: the GPU's whole memory.
  static Result<std::unique_ptr<CudaDevice>> Create(int index, uint64_t memory_limit_bytes);
  ~CudaDevice() override;

  Result<DeviceBuffer> Allocate(size_t bytes, MemoryCategory category) override;
  Result<DeviceBuffer> AllocateAsync(size_t bytes, MemoryCategory category,
                                     Stream& stream) override;
  Result<PinnedBuffer> AllocatePinnedHost(size_t bytes, MemoryCategory category) override;
  Result<std::unique_ptr<Stream>> CreateStream() override;
  Result<std::unique_ptr<Event>> CreateEvent() override;
  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                   Stream& stream) override;
  Status Copy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                     size_t height, CopyKind kind, Stream& stream) override;
  Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) override;
  Status LaunchHostFunc(Stream& stream, std::function<Status()> fn,
                        std::string_view name = "host function") override;
  Status Synchronize() override;
  DeviceMemoryInfo MemoryInfo() const override;

  // Makes this device current for the calling thread (cudaSetDevice).
  Status MakeCurrent() const;

  // Called by CudaStream.
  void RegisterStream(uint64_t id, std::weak_ptr<CudaStreamState> state);
  void UnregisterStream(uint64_t id);

 protected:
  void FreeDeviceMemory(void* data, size_t reserved, uint64_t stream_id) override;
  void FreeDeviceMemoryAsync(void* data, size_t reserved, Stream& stream) override;
  void FreePinnedMemory(void* data, size_t reserved) override;

 private:
  CudaDevice(int index, uint64_t capacity);
  CudaStream& StreamOf(Stream& stream) const;
  // Counts `reserved` bytes against the capacity, or returns the exhausted error.
  Status Reserve(size_t bytes, size_t reserved, MemoryCategory category);
  void Unreserve(size_t reserved) { used_.fetch_sub(reserved); }

  const uint64_t capacity_;
  std::atomic<uint64_t> used_{0};
  std::atomic<int64_t> live_pinned_buffers_{0};
  mutable std::mutex streams_mu_;
  std::unordered_map<uint64_t, std::weak_ptr<CudaStreamState>> streams_;
};

}  // namespace sluice
