#include "offload/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <utility>

#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::offload {
namespace {

constexpr uint64_t kHugePage = 2ull << 20;

}  // namespace

Result<AlignedBuffer> AlignedBuffer::Allocate(uint64_t bytes, AlignedBufferOptions options) {
  if (bytes == 0) return InvalidArgumentError("cannot allocate an empty aligned buffer");
  AlignedBuffer buffer;
  buffer.size_ = AlignUp(bytes, kIoAlignment);
  const bool huge = options.huge_pages && buffer.size_ >= kHugePage;
  // For huge pages the start must be 2 MiB aligned: over-map by one huge page and trim.
  const uint64_t map_size = huge ? buffer.size_ + kHugePage : buffer.size_;
  void* mapping =
      mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    return ResourceExhaustedError("mmap of {} bytes for an I/O buffer failed: {}", map_size,
                                  internal::ErrnoText(errno));
  }
  buffer.mapping_ = mapping;
  buffer.mapping_size_ = map_size;
  buffer.data_ = mapping;
  if (huge) {
    auto start = reinterpret_cast<uintptr_t>(mapping);
    buffer.data_ = reinterpret_cast<void*>(AlignUp(start, kHugePage));
    // Advice only: without THP the buffer is still correct, merely made of 4 KiB pages.
    (void)madvise(buffer.data_, buffer.size_, MADV_HUGEPAGE);
  }
  if (options.lock) {
    if (mlock(buffer.data_, buffer.size_) == 0) {
      buffer.locked_ = true;
    } else {
      SLUICE_LOG_ONCE(kWarn, "aio",
                      "mlock of a {}-byte I/O buffer failed: {}; buffers stay pageable (raise "
                      "RLIMIT_MEMLOCK, `ulimit -l`, or grant CAP_IPC_LOCK to pin them)",
                      buffer.size_, internal::ErrnoText(errno));
    }
  }
  if (!buffer.locked_) {
    // mlock faults pages in; without it, fault them in now so the first I/O does not pay for it.
    auto* bytes_ptr = static_cast<volatile char*>(buffer.data_);
    for (uint64_t i = 0; i < buffer.size_; i += kIoAlignment) bytes_ptr[i] = 0;
  }
  return buffer;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept { *this = std::move(other); }

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { Release(); }

void AlignedBuffer::Release() {
  if (mapping_ == nullptr) return;
  if (locked_) (void)munlock(data_, size_);
  SLUICE_CHECK_SYS(munmap(mapping_, mapping_size_));
  mapping_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}

}  // namespace sluice::offload
