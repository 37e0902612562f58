#include "offload/swap_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <random>
#include <utility>

#include "offload/aio_errors.h"
#include "offload/aligned_buffer.h"
#include "offload/chunked_checksum.h"
#include "runtime/logging.h"

namespace sluice::offload {

using internal::ErrnoStatus;
using internal::ErrnoText;

namespace {

constexpr uint64_t kExtentAlignment = kIoAlignment;

std::string_view KindName(SwapTensorKind kind) {
  switch (kind) {
    case SwapTensorKind::kParams:
      return "params";
    case SwapTensorKind::kExpAvg:
      return "exp_avg";
    case SwapTensorKind::kExpAvgSq:
      return "exp_avg_sq";
    case SwapTensorKind::kGrads:
      return "grads";
  }
  return "?";
}

}  // namespace

std::string SwapTensorName(int sub_group, SwapTensorKind kind) {
  return fmt::format("subgroup{}.{}", sub_group, KindName(kind));
}

// ---------------------------------------------------------------------------------------------
// Extents

SwapExtent SwapStore::ToExtent(const SwapExtentRecord& record) const {
  return SwapExtent{record.name,
                    record.offset,
                    record.capacity,
                    record.length,
                    record.checksum,
                    (record.flags & kSwapExtentWritten) != 0,
                    (record.flags & kSwapExtentChecksummed) != 0,
                    (record.flags & kSwapExtentChecksummed) != 0
                        ? uint64_t{1} << record.checksum_chunk_shift
                        : 0};
}

uint64_t SwapStoreDiskBytes(const SwapStoreOptions& options, uint64_t extent_bytes) {
  const uint64_t files = std::max<uint64_t>(options.paths.size(), 1);
  const uint64_t row = options.stripe_size * files;
  const uint64_t data_offset = SwapDataOffset(SwapSlotBytes(options.max_extents));
  const uint64_t data =
      AlignUp(std::max(options.capacity_bytes, AlignUp(extent_bytes, kExtentAlignment)), row);
  return files * (data_offset + kSwapLockFileBytes) + data;
}

Status SwapStore::GrowLocked(uint64_t needed, uint64_t min_step) {
  if (options_.growth_bytes == 0) {
    return ResourceExhaustedError(
        "swap store {} is full ({} of {} bytes free, {} needed) and "
        "growth is disabled",
        Describe(), allocator_.free_bytes(), header_.capacity, needed);
  }
  // The new space joins the free range at the end: only what that range lacks is added.
  const uint64_t at_end = allocator_.free_ending_at(header_.capacity);
  const uint64_t lacking = needed > at_end ? needed - at_end : 0;
  const uint64_t grow = AlignUp(std::max(min_step, lacking), SwapRowBytes(header_));
  if (grow == 0) return OkStatus();
  const uint64_t new_capacity = header_.capacity + grow;
  // (A named Status: WithContext on a temporary returns a reference to that temporary.)
  Status grown = engine_.Preallocate(data_file_, new_capacity);
  if (!grown.ok()) {
    return std::move(grown).WithContext(fmt::format("growing swap store {} from {} to {} bytes",
                                                    Describe(), header_.capacity, new_capacity));
  }
  allocator_.AddSpace(header_.capacity, grow);
  header_.capacity = new_capacity;
  return OkStatus();
}

Status SwapStore::EnsureRoom(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return FailedPreconditionError("swap store {} is closed", Describe());
  const uint64_t needed = AlignUp(bytes, kExtentAlignment);
  if (allocator_.free_ending_at(header_.capacity) >= needed) return OkStatus();
  const uint64_t old_capacity = header_.capacity;
  Status grown = GrowLocked(needed, /*min_step=*/0);
  if (!grown.ok()) {
    return std::move(grown).WithContext(
        fmt::format("making room for {} bytes of swap extents", bytes));
  }
  Status persisted = PersistLocked();
  if (!persisted.ok()) {
    // As in Allocate: memory and disk agree on the old capacity.
    (void)allocator_.Reserve(old_capacity, header_.capacity - old_capacity);
    header_.capacity = old_capacity;
    return std::move(persisted).WithContext(
        fmt::format("making room for {} bytes of swap extents", bytes));
  }
  return OkStatus();
}

Result<SwapExtent> SwapStore::Allocate(std::string_view name, uint64_t bytes) {
  if (name.empty() || name.size() > kSwapMaxNameBytes ||
      name.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("swap extent name '{}' must be 1 to {} bytes without NUL", name,
                                kSwapMaxNameBytes);
  }
  if (bytes == 0) return InvalidArgumentError("swap extent '{}' needs a positive size", name);
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return FailedPreconditionError("swap store {} is closed", Describe());
  if (extents_.find(name) != extents_.end()) {
    return InvalidArgumentError("swap extent '{}' already exists in {}", name, Describe());
  }
  if (extents_.size() >= header_.max_extents) {
    return ResourceExhaustedError(
        "swap store {} has {} extents, its table's maximum (create it "
        "with a larger max_extents)",
        Describe(), header_.max_extents);
  }
  const uint64_t capacity = AlignUp(bytes, kExtentAlignment);
  std::optional<uint64_t> offset = allocator_.Allocate(capacity);
  const uint64_t old_capacity = header_.capacity;
  if (!offset.has_value()) {
    Status grown = GrowLocked(capacity, options_.growth_bytes);
    if (!grown.ok()) {
      return std::move(grown).WithContext(
          fmt::format("allocating {} bytes for swap extent '{}'", bytes, name));
    }
    offset = allocator_.Allocate(capacity);
    SLUICE_CHECK(offset.has_value()) << "no room after growing the swap store";
  }
  SwapExtentRecord record;
  record.name = std::string(name);
  record.offset = *offset;
  record.capacity = capacity;
  auto [it, inserted] = extents_.emplace(record.name, Extent{record, 0, {}});
  Status persisted = PersistLocked();
  if (!persisted.ok()) {
    // Keep memory and disk in agreement: the allocation did not happen.
    extents_.erase(it);
    allocator_.Free(record.offset, capacity);
    if (header_.capacity != old_capacity) {
      (void)allocator_.Reserve(old_capacity, header_.capacity - old_capacity);
      header_.capacity = old_capacity;
    }
    return std::move(persisted).WithContext(fmt::format("allocating swap extent '{}'", name));
  }
  return ToExtent(record);
}

Status SwapStore::Free(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = extents_.find(name);
  if (it == extents_.end()) {
    return NotFoundError("no swap extent '{}' in {}", name, Describe());
  }
  if (it->second.writes_in_flight > 0) {
    return FailedPreconditionError(
        "swap extent '{}' has a write in flight; wait on it before "
        "freeing",
        name);
  }
  const SwapExtentRecord record = it->second.record;
  extents_.erase(it);
  allocator_.Free(record.offset, record.capacity);
  return PersistLocked();
}

Result<SwapExtent> SwapStore::Find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = extents_.find(name);
  if (it == extents_.end()) return NotFoundError("no swap extent '{}' in {}", name, Describe());
  return ToExtent(it->second.record);
}

std::vector<SwapExtent> SwapStore::Extents() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SwapExtent> out;
  for (const auto& [name, extent] : extents_) out.push_back(ToExtent(extent.record));
  return out;
}

uint64_t SwapStore::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return header_.capacity;
}

uint64_t SwapStore::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocator_.free_bytes();
}

uint64_t SwapStore::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return header_.generation;
}

// ---------------------------------------------------------------------------------------------
// I/O

SwapHandle SwapStore::WriteAsync(std::string_view name, const void* data, uint64_t length) {
  uint64_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return SwapHandle::Failed(FailedPreconditionError("swap store is closed"));
    auto it = extents_.find(name);
    if (it == extents_.end()) {
      return SwapHandle::Failed(NotFoundError("no swap extent '{}' in {}", name, Describe()));
    }
    Extent& extent = it->second;
    if (AlignUp(length, kIoAlignment) > extent.record.capacity) {
      return SwapHandle::Failed(OutOfRangeError(
          "writing {} bytes into swap extent '{}' overflows its capacity of {} bytes", length, name,
          extent.record.capacity));
    }
    // The old contents are being replaced: until this write completes they are invalid.
    extent.record.flags = 0;
    ++extent.writes_in_flight;
    offset = extent.record.offset;
  }
  // One request, submitted before any hashing: the engine spreads it over the rings at
  // block_size and the device starts at once. Each chunk is hashed once its pieces are written,
  // by the waiting thread or a backend thread (the buffer must stay unchanged until the handle
  // is done, so the hash covers the bytes the device wrote).
  const uint64_t transfer = AlignUp(length, kIoAlignment);
  std::shared_ptr<ChunkedChecksum> checksum;
  if (options_.verify_checksums) {
    checksum = std::make_shared<ChunkedChecksum>(
        static_cast<const std::byte*>(data), length, transfer,
        static_cast<uint32_t>(std::countr_zero(options_.checksum_chunk_bytes)));
  }
  const IoRequest request{IoOp::kWrite, data_file_, offset, const_cast<void*>(data),
                          transfer,     checksum};
  return SwapHandle::Make(
      engine_.Submit({&request, 1}), checksum, nullptr,
      [this, name = std::string(name), length](Status status, const ChunkedChecksum* sum) {
        return FinishWrite(name, length, sum, std::move(status));
      });
}

Status SwapStore::FinishWrite(const std::string& name, uint64_t length,
                              const ChunkedChecksum* checksum, Status io_status) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = extents_.find(name);
  SLUICE_CHECK(it != extents_.end()) << "swap extent freed during a write: " << name;
  Extent& extent = it->second;
  --extent.writes_in_flight;
  if (!io_status.ok()) {
    extent.record.flags = 0;
    extent.chunk_sums.clear();
    return std::move(io_status).WithContext(fmt::format("writing swap extent '{}'", name));
  }
  extent.record.length = length;
  extent.record.flags = kSwapExtentWritten;
  extent.record.checksum = 0;
  extent.record.checksum_chunk_shift = 0;
  extent.chunk_sums.clear();
  if (checksum != nullptr) {
    extent.record.flags |= kSwapExtentChecksummed;
    extent.record.checksum = checksum->Digest();
    extent.record.checksum_chunk_shift = checksum->chunk_shift();
    extent.chunk_sums = checksum->chunk_sums();
  }
  return OkStatus();
}

SwapHandle SwapStore::ReadAsync(std::string_view name, void* data, uint64_t length) {
  SwapExtentRecord record;
  std::vector<uint64_t> chunk_sums;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return SwapHandle::Failed(FailedPreconditionError("swap store is closed"));
    auto it = extents_.find(name);
    if (it == extents_.end()) {
      return SwapHandle::Failed(NotFoundError("no swap extent '{}' in {}", name, Describe()));
    }
    const Extent& extent = it->second;
    if (extent.writes_in_flight > 0) {
      return SwapHandle::Failed(FailedPreconditionError(
          "swap extent '{}' has a write in flight; wait on it before reading", name));
    }
    record = extent.record;
    chunk_sums = extent.chunk_sums;
  }
  if ((record.flags & kSwapExtentWritten) == 0) {
    return SwapHandle::Failed(FailedPreconditionError(
        "swap extent '{}' holds no data (never written, or its last write failed)", name));
  }
  if (length > record.length) {
    return SwapHandle::Failed(OutOfRangeError(
        "reading {} bytes from swap extent '{}' goes past its end: it holds {} bytes (capacity "
        "{})",
        length, name, record.length, record.capacity));
  }
  if (length < record.length) {
    return SwapHandle::Failed(InvalidArgumentError(
        "reading {} bytes of swap extent '{}', which holds {}: reads cover whole extents "
        "(checksums are per extent)",
        length, name, record.length));
  }
  const uint64_t transfer = AlignUp(length, kIoAlignment);
  std::shared_ptr<ChunkedChecksum> checksum;
  std::unique_ptr<SwapHandle::Verification> verification;
  if (options_.verify_checksums && (record.flags & kSwapExtentChecksummed) != 0) {
    // The chunk size the extent was written with, which need not be today's option. Each chunk
    // is hashed once its bytes have arrived, while later pieces are still in flight.
    checksum = std::make_shared<ChunkedChecksum>(static_cast<const std::byte*>(data), length,
                                                 transfer, record.checksum_chunk_shift);
    verification = std::make_unique<SwapHandle::Verification>();
    verification->expected = record.checksum;
    verification->expected_chunks = std::move(chunk_sums);
    verification->what = fmt::format("swap extent '{}' (offset {}, {} bytes) of {}", record.name,
                                     record.offset, record.length, Describe());
  }
  const IoRequest request{IoOp::kRead, data_file_, record.offset, data, transfer, checksum};
  return SwapHandle::Make(
      engine_.Submit({&request, 1}), std::move(checksum), std::move(verification),
      [name = std::string(name)](Status status, const ChunkedChecksum*) {
        return status.ok()
                   ? status
                   : std::move(status).WithContext(fmt::format("reading swap extent '{}'", name));
      });
}

}  // namespace sluice::offload
