#include "engine/model/buffer.h"

#include <cstdlib>
#include <utility>

#include "runtime/memory_accounting.h"
#include "runtime/size_format.h"

namespace sluice::model {
namespace {

constexpr size_t kHostAlignment = 64;

class HostOwner final : public Buffer::Owner {
 public:
  HostOwner(void* data, size_t bytes, MemoryCategory category)
      : data_(data), charge_(MemoryTier::kHost, category, bytes) {}
  ~HostOwner() override { std::free(data_); }

 private:
  void* data_;
  MemoryCharge charge_;
};

class DeviceOwner final : public Buffer::Owner {
 public:
  explicit DeviceOwner(DeviceBuffer buffer) : buffer_(std::move(buffer)) {}

 private:
  DeviceBuffer buffer_;
};

}  // namespace

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_(std::move(other.owner_)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    owner_ = std::move(other.owner_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void Buffer::Reset() {
  owner_.reset();
  data_ = nullptr;
  size_ = 0;
}

Result<Buffer> HostAllocator::Allocate(size_t bytes, MemoryCategory category) {
  if (bytes == 0) return Buffer();
  void* data = std::aligned_alloc(kHostAlignment, AlignUp(bytes, kHostAlignment));
  if (data == nullptr) {
    return ResourceExhaustedError(
        "host: cannot allocate {} for {}; lower the batch size or the "
        "model size",
        FormatBytes(bytes), MemoryCategoryName(category));
  }
  return Buffer(data, bytes, std::make_unique<HostOwner>(data, bytes, category));
}

Result<Buffer> DeviceAllocator::Allocate(size_t bytes, MemoryCategory category) {
  if (bytes == 0) return Buffer();
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, device_->Allocate(bytes, category));
  void* data = buffer.data();
  return Buffer(data, bytes, std::make_unique<DeviceOwner>(std::move(buffer)));
}

}  // namespace sluice::model
