// Host buffers for O_DIRECT I/O: page-aligned, optionally backed by transparent huge pages (so a
// large buffer is physically contiguous in 2 MiB pieces and the block layer can merge requests),
// and mlock()ed when the process may (best effort: an unlocked buffer still works).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/status.h"

namespace sluice::offload {

// O_DIRECT needs buffer addresses, file offsets and lengths aligned to the logical block size;
// Sluice uses the page size everywhere so that any filesystem and any device accept them.
inline constexpr uint64_t kIoAlignment = 4096;

constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}
constexpr bool IsAligned(uint64_t value, uint64_t alignment = kIoAlignment) {
  return value % alignment == 0;
}
inline bool IsAligned(const void* pointer, uint64_t alignment = kIoAlignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

struct AlignedBufferOptions {
  bool lock = true;        // mlock(); a failure is logged once and the buffer stays unlocked
  bool huge_pages = true;  // MADV_HUGEPAGE for buffers of 2 MiB and more
};

class AlignedBuffer {
 public:
  // `bytes` is rounded up to kIoAlignment; the memory is zero-filled and already faulted in.
  static Result<AlignedBuffer> Allocate(uint64_t bytes, AlignedBufferOptions options = {});

  AlignedBuffer() = default;
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool locked() const { return locked_; }
  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(data_), size_}; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Release();

  void* mapping_ = nullptr;  // what mmap returned (may start before data_)
  uint64_t mapping_size_ = 0;
  void* data_ = nullptr;
  uint64_t size_ = 0;
  bool locked_ = false;
};

}  // namespace sluice::offload
