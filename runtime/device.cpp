#include "runtime/device.h"

#include <atomic>
#include <utility>

#include "runtime/size_format.h"

namespace sluice {

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

Result<DeviceKind> ParseDeviceKind(std::string_view name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  return InvalidArgumentError("unknown device kind \"{}\"; expected \"cpu\" or \"cuda\"", name);
}

std::string_view CopyKindName(CopyKind kind) {
  switch (kind) {
    case CopyKind::kH2D:
      return "H2D";
    case CopyKind::kD2H:
      return "D2H";
    case CopyKind::kD2D:
      return "D2D";
    case CopyKind::kH2H:
      return "H2H";
  }
  return "unknown";
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      reserved_(std::exchange(other.reserved_, 0)),
      stream_id_(std::exchange(other.stream_id_, 0)),
      charge_(std::move(other.charge_)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    reserved_ = std::exchange(other.reserved_, 0);
    stream_id_ = std::exchange(other.stream_id_, 0);
    charge_ = std::move(other.charge_);
  }
  return *this;
}

void DeviceBuffer::FreeAsync(Stream& stream) {
  if (data_ == nullptr) return;
  SLUICE_CHECK(&stream.device() == device_) << "DeviceBuffer of " << device_->name()
                                            << " freed on a stream of " << stream.device().name();
  // The ledger counts what owners hold; the device keeps counting the bytes until the stream
  // reaches the free.
  charge_.Release();
  device_->FreeDeviceMemoryAsync(std::exchange(data_, nullptr), reserved_, stream);
  device_ = nullptr;
  size_ = reserved_ = 0;
  stream_id_ = 0;
}

void DeviceBuffer::Reset() {
  if (data_ == nullptr) return;
  charge_.Release();
  device_->FreeDeviceMemory(std::exchange(data_, nullptr), reserved_, stream_id_);
  device_ = nullptr;
  size_ = reserved_ = 0;
  stream_id_ = 0;
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      reserved_(std::exchange(other.reserved_, 0)),
      page_locked_(std::exchange(other.page_locked_, false)),
      charge_(std::move(other.charge_)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    reserved_ = std::exchange(other.reserved_, 0);
    page_locked_ = std::exchange(other.page_locked_, false);
    charge_ = std::move(other.charge_);
  }
  return *this;
}

void PinnedBuffer::Reset() {
  if (data_ == nullptr) return;
  charge_.Release();
  device_->FreePinnedMemory(std::exchange(data_, nullptr), reserved_);
  device_ = nullptr;
  size_ = reserved_ = 0;
  page_locked_ = false;
}

Stream::Stream(Device& device) : device_(&device) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
}

std::string Stream::name() const { return fmt::format("{}/stream{}", device_->name(), id_); }

Result<float> ElapsedMs(const Event& start, const Event& end) {
  if (&start.device() != &end.device()) {
    return InvalidArgumentError("ElapsedMs: start event of {} and end event of {}",
                                start.device().name(), end.device().name());
  }
  return end.ElapsedMsSince(start);
}

Device::Device(DeviceKind kind, int index)
    : kind_(kind), index_(index), name_(fmt::format("{}:{}", DeviceKindName(kind), index)) {}

DeviceBuffer Device::MakeDeviceBuffer(void* data, size_t size, size_t reserved, uint64_t stream_id,
                                      MemoryCategory category) {
  return DeviceBuffer(this, data, size, reserved, stream_id,
                      MemoryCharge(MemoryTier::kDevice, category, reserved));
}

PinnedBuffer Device::MakePinnedBuffer(void* data, size_t size, size_t reserved, bool page_locked,
                                      MemoryCategory category) {
  return PinnedBuffer(this, data, size, reserved, page_locked,
                      MemoryCharge(MemoryTier::kHostPinned, category, reserved));
}

Status DeviceMemoryExhaustedError(const Device& device, size_t bytes, MemoryCategory category,
                                  uint64_t used, uint64_t capacity, std::string_view detail) {
  return ResourceExhaustedError(
      "device {}: cannot allocate {} for {}: {} of {} in use{}{}{}; raise device.memory_limit or "
      "keep less on the device (smaller micro-batch, zero_optimization.offload_param / "
      "offload_optimizer)",
      device.name(), FormatBytes(bytes), MemoryCategoryName(category), FormatBytes(used),
      FormatBytes(capacity), detail.empty() ? "" : " (", detail, detail.empty() ? "" : ")");
}

}  // namespace sluice
