// Memory for a model's flat parameter and gradient buffers (ModelStorage::kFlat): a
// BufferAllocator puts them in the Device's capped arena (charged to the params / grads
// categories of the memory ledger) or, for tests and conversion tools, in plain host memory.
// Activations and scratch are stream-ordered device memory of the pass (forward_context.h). A
// Buffer owns its bytes and gives them back when destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/device.h"
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice::model {

// Owned bytes; freed (and their ledger charge released) when destroyed. Move-only. An empty
// buffer has data() == nullptr and size() == 0.
class Buffer {
 public:
  // What frees the bytes: the allocator's own handle (a DeviceBuffer, an aligned host block).
  class Owner {
   public:
    virtual ~Owner() = default;
  };

  Buffer() = default;
  Buffer(void* data, size_t size, std::unique_ptr<Owner> owner)
      : data_(data), size_(size), owner_(std::move(owner)) {}
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() = default;

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }
  void Reset();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<Owner> owner_;
};

class BufferAllocator {
 public:
  virtual ~BufferAllocator() = default;

  // `bytes` of uninitialized memory, at least 64-byte aligned, charged to `category` in the
  // allocator's tier. bytes == 0 gives an empty buffer. A ResourceExhausted error (a full device
  // arena) names the request and what to change.
  virtual Result<Buffer> Allocate(size_t bytes, MemoryCategory category) = 0;
  // The tier tensors from this allocator are tagged with.
  virtual MemoryTier tier() const = 0;
  // Whether the host can read and write the memory directly: the CPU ops need it.
  virtual bool host_accessible() const = 0;
};

// Pageable host memory (aligned_alloc), charged to tier `host` of the global memory ledger.
class HostAllocator final : public BufferAllocator {
 public:
  Result<Buffer> Allocate(size_t bytes, MemoryCategory category) override;
  MemoryTier tier() const override { return MemoryTier::kHost; }
  bool host_accessible() const override { return true; }
};

// Device memory from Device::Allocate (the capped arena on the CPU backend), charged to tier
// `device` by the device itself. Host-accessible only on the CPU backend. The device must outlive
// every buffer.
class DeviceAllocator final : public BufferAllocator {
 public:
  explicit DeviceAllocator(Device& device) : device_(&device) {}
  Result<Buffer> Allocate(size_t bytes, MemoryCategory category) override;
  MemoryTier tier() const override { return MemoryTier::kDevice; }
  bool host_accessible() const override { return device_->kind() == DeviceKind::kCpu; }

 private:
  Device* device_;
};

}  // namespace sluice::model
