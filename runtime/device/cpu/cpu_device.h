// The CPU device: the Device contract of runtime/device.h on the host. Device memory is a
// separate arena of exactly `device.memory_limit` bytes (CpuArena), streams are worker threads
// (CpuStreamQueue), kernels run on streams as host functions.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "runtime/device.h"
#include "runtime/device/cpu/cpu_arena.h"
#include "runtime/device/cpu/cpu_stream_queue.h"
#include "runtime/device/cpu/memory_protection.h"

namespace sluice {

class CpuDevice final : public Device {
 public:
  // memory_limit_bytes > 0; rounded down to a multiple of kDeviceAlignment. `protection` asks
  // for the arena to be protected from host threads (memory_protection.h); SLUICE_DEVICE_PROTECT
  // overrides it. Fails for `on` where the CPU or kernel has no protection keys.
  static Result<std::unique_ptr<CpuDevice>> Create(
      int index, uint64_t memory_limit_bytes,
      DeviceMemoryProtection protection = DeviceMemoryProtection::kOff);
  // CHECK-fails when streams or buffers of this device are still alive.
  ~CpuDevice() override;

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

  // The arena's own view, with pending stream-ordered frees and block counts.
  CpuArena::Stats ArenaStats() const { return arena_->stats(); }

  // Whether host threads are kept out of this device's memory, and why (not).
  const DeviceProtectionDecision& protection() const { return protection_; }
  bool memory_protected() const { return guard_ != nullptr; }
  // The key stream workers grant themselves per task; -1 when unprotected.
  int protection_key() const { return guard_ != nullptr ? guard_->pkey() : -1; }

  // Called by CpuStream.
  void RegisterStream(uint64_t id, std::weak_ptr<CpuStreamQueue> queue);
  void UnregisterStream(uint64_t id);

 protected:
  void FreeDeviceMemory(void* data, size_t reserved, uint64_t stream_id) override;
  void FreeDeviceMemoryAsync(void* data, size_t reserved, Stream& stream) override;
  void FreePinnedMemory(void* data, size_t reserved) override;

 private:
  CpuDevice(int index, std::unique_ptr<CpuArena> arena, DeviceProtectionDecision protection,
            std::unique_ptr<DeviceMemoryGuard> guard);
  CpuStreamQueue& QueueOf(Stream& stream) const;
  void FreeOnQueue(void* data, CpuStreamQueue& queue, uint64_t stream_id);
  Status CheckRange(const void* pointer, size_t bytes, bool device_side, std::string_view what,
                    std::string_view operation) const;
  Result<DeviceBuffer> AllocateOnArena(size_t bytes, MemoryCategory category, uint64_t stream_id);

  std::unique_ptr<CpuArena> arena_;
  DeviceProtectionDecision protection_;
  std::unique_ptr<DeviceMemoryGuard> guard_;  // null when unprotected; destroyed before arena_
  mutable std::mutex streams_mu_;
  std::unordered_map<uint64_t, std::weak_ptr<CpuStreamQueue>> streams_;
  std::atomic<int64_t> live_pinned_buffers_{0};
};

}  // namespace sluice
