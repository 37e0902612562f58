// SwapStore's files: creating and opening them, validating and writing the headers, closing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <random>
#include <utility>

#include "offload/aio_errors.h"
#include "offload/aligned_buffer.h"
#include "offload/chunked_checksum.h"
#include "offload/swap_store.h"
#include "runtime/durable_file.h"
#include "runtime/logging.h"

namespace sluice::offload {

using internal::ErrnoStatus;
using internal::ErrnoText;

SwapStore::SwapStore(AioEngine& engine, const SwapStoreOptions& options)
    : engine_(engine), options_(options), allocator_(kIoAlignment) {
  const std::string name = options.file_name.empty()
                               ? fmt::format("sluice_swap.rank{}.swp", options.rank)
                               : options.file_name;
  for (const std::string& dir : options.paths) file_paths_.push_back(dir + "/" + name);
}

SwapStore::~SwapStore() {
  if (!open_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, extent] : extents_) {
      // A write handle outliving the store would update freed memory when waited on.
      SLUICE_CHECK_EQ(extent.writes_in_flight, 0)
          << "swap store destroyed while extent '" << name
          << "' has a write in flight: wait on its handle first";
    }
  }
  Status status = Close();
  if (!status.ok()) {
    SLUICE_LOG(kError, "swap", "closing swap store {} failed: {}", Describe(), status.message());
  }
}

std::string SwapStore::Describe() const {
  return file_paths_.size() == 1
             ? file_paths_.front()
             : fmt::format("{} (striped over {} files)", file_paths_.front(), file_paths_.size());
}

namespace {

Status PreadFull(int fd, std::byte* out, uint64_t bytes, uint64_t offset, uint64_t* got,
                 const std::string& path) {
  *got = 0;
  while (*got < bytes) {
    const ssize_t n = pread(fd, out + *got, bytes - *got, static_cast<off_t>(offset + *got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      return ErrnoStatus(err, "reading the header of {} at offset {} failed: {}", path,
                         offset + *got, ErrnoText(err));
    }
    if (n == 0) break;  // short file: the caller decides
    *got += static_cast<uint64_t>(n);
  }
  return OkStatus();
}

Status ValidateOptions(const SwapStoreOptions& options) {
  if (options.paths.empty()) {
    return InvalidArgumentError("nvme_path is empty: give one directory or a list of them");
  }
  if (options.rank < 0) return InvalidArgumentError("rank must be >= 0, got {}", options.rank);
  if (options.stripe_size == 0 || !IsAligned(options.stripe_size)) {
    return InvalidArgumentError("swap stripe size must be a positive multiple of {}, got {}",
                                kIoAlignment, options.stripe_size);
  }
  if (options.max_extents == 0 || options.max_extents > (1u << 20)) {
    return InvalidArgumentError("swap max_extents must be in [1, 1048576], got {}",
                                options.max_extents);
  }
  if (!std::has_single_bit(options.checksum_chunk_bytes) ||
      options.checksum_chunk_bytes < (uint64_t{1} << kMinChecksumChunkShift) ||
      options.checksum_chunk_bytes > (uint64_t{1} << kMaxChecksumChunkShift)) {
    return InvalidArgumentError(
        "swap checksum_chunk_bytes must be a power of two from {} to {}, got {}",
        uint64_t{1} << kMinChecksumChunkShift, uint64_t{1} << kMaxChecksumChunkShift,
        options.checksum_chunk_bytes);
  }
  return OkStatus();
}

}  // namespace

Status SwapStore::LockFiles() {
  for (const std::string& path : file_paths_) {
    SLUICE_ASSIGN_OR_RETURN(
        FileLock lock,
        FileLock::Acquire(path + ".lock", "swap file", path,
                          "give each run its own zero_optimization.offload_optimizer / "
                          "offload_param nvme_path, or stop the other run first"));
    locks_.push_back(std::move(lock));
  }
  return OkStatus();
}

Status SwapStore::OpenHeaderFiles(bool create) {
  Status opened = OpenEachHeaderFile(create);
  if (!opened.ok()) {
    for (int fd : header_fds_) close(fd);
    header_fds_.clear();
  }
  return opened;
}

Status SwapStore::OpenEachHeaderFile(bool create) {
  for (const std::string& path : file_paths_) {
    // O_NONBLOCK: a FIFO in the swap file's place is refused below instead of blocking.
    const int fd =
        open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | (create ? O_CREAT : 0), 0600);
    if (fd < 0) {
      const int err = errno;
      SLUICE_RETURN_IF_ERROR(CheckRegularPath(path).WithContext("swap file"));
      return ErrnoStatus(err, "opening swap file {} failed: {}{}", path, ErrnoText(err),
                         err == ENOENT && !create
                             ? " (no swap store there: create it first, or check nvme_path "
                               "and the rank)"
                             : "");
    }
    header_fds_.push_back(fd);
    SLUICE_RETURN_IF_ERROR(UseAsRegularFile(fd, path).WithContext("swap file"));
  }
  return OkStatus();
}

Result<std::unique_ptr<SwapStore>> SwapStore::Create(AioEngine& engine,
                                                     const SwapStoreOptions& options) {
  SLUICE_RETURN_IF_ERROR(ValidateOptions(options));
  // As DeepSpeed's swappers do: a missing nvme_path directory is made, not an error.
  for (const std::string& path : options.paths) {
    SLUICE_RETURN_IF_ERROR(
        CreateDirectories(path, "set nvme_path to a writable directory").WithContext("swap store"));
  }
  std::unique_ptr<SwapStore> store(new SwapStore(engine, options));
  SLUICE_RETURN_IF_ERROR(store->LockFiles());
  SwapHeader& header = store->header_;
  header.rank = static_cast<uint32_t>(options.rank);
  header.stripe_count = static_cast<uint32_t>(options.paths.size());
  header.stripe_size = options.stripe_size;
  header.max_extents = options.max_extents;
  header.slot_bytes = SwapSlotBytes(options.max_extents);
  header.data_offset = SwapDataOffset(header.slot_bytes);
  header.capacity = AlignUp(options.capacity_bytes, SwapRowBytes(header));
  std::random_device random;
  header.store_id = (uint64_t{random()} << 32) ^ random();

  AioFileOptions file_options;
  file_options.paths = store->file_paths_;
  file_options.stripe_size = options.stripe_size;
  file_options.base_offset = header.data_offset;
  file_options.create = true;
  file_options.truncate = true;
  Result<AioFileId> data_file = engine.Open(file_options);
  if (!data_file.ok()) {
    store->ReleaseLocks();
    return data_file.status();
  }
  store->data_file_ = *data_file;
  Status status = store->OpenHeaderFiles(/*create=*/false);
  // Even with no capacity, the files hold the header slots.
  if (status.ok()) {
    status = engine.Preallocate(store->data_file_, header.capacity)
                 .WithContext("creating swap store " + store->Describe());
  }
  if (status.ok()) {
    store->allocator_.AddSpace(0, header.capacity);
    std::lock_guard<std::mutex> lock(store->mu_);
    status = store->PersistLocked();
  }
  if (!status.ok()) {
    store->Abandon();
    return status;
  }
  store->open_ = true;
  SLUICE_LOG(kDebug, "swap", "created swap store {}: {} bytes, stripe {} x {}", store->Describe(),
             header.capacity, header.stripe_size, header.stripe_count);
  return store;
}

Result<std::unique_ptr<SwapStore>> SwapStore::Open(AioEngine& engine,
                                                   const SwapStoreOptions& options) {
  SLUICE_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<SwapStore> store(new SwapStore(engine, options));
  SLUICE_RETURN_IF_ERROR(store->LockFiles());
  SLUICE_RETURN_IF_ERROR(store->OpenHeaderFiles(/*create=*/false));
  Status loaded = store->LoadHeaders();
  if (!loaded.ok()) {
    for (int fd : store->header_fds_) close(fd);
    store->header_fds_.clear();
    return loaded;
  }
  AioFileOptions file_options;
  file_options.paths = store->file_paths_;
  file_options.stripe_size = store->header_.stripe_size;
  file_options.base_offset = store->header_.data_offset;
  file_options.create = false;
  auto data_file = engine.Open(file_options);
  if (!data_file.ok()) {
    for (int fd : store->header_fds_) close(fd);
    store->header_fds_.clear();
    return data_file.status();
  }
  store->data_file_ = *data_file;
  store->open_ = true;
  return store;
}

Status SwapStore::LoadHeaders() {
  std::vector<SwapHeader> headers;
  for (size_t i = 0; i < file_paths_.size(); ++i) {
    const std::string& path = file_paths_[i];
    const int fd = header_fds_[i];
    // Slot A's fixed part says where slot B starts; if A is unreadable, the configured
    // max_extents gives the same answer for a store created with it.
    std::vector<std::byte> fixed(kSwapFixedHeaderBytes);
    uint64_t got = 0;
    SLUICE_RETURN_IF_ERROR(PreadFull(fd, fixed.data(), fixed.size(), 0, &got, path));
    uint64_t slot_bytes = SwapSlotBytes(options_.max_extents);
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      return ErrnoStatus(err, "fstat of {} failed: {}", path, ErrnoText(err));
    }
    // The fixed part is read before any checksum: a damaged max_extents (up to 2^32 - 1, slots
    // of 512 GiB) must not size the buffers below. A file holds both slots, so a slot size it
    // cannot hold twice is damage: the configured size is read instead, and the decode of slot
    // A names what is wrong.
    if (auto peek = PeekSwapHeader({fixed.data(), got}, path);
        peek.ok() && peek->slot_bytes <= static_cast<uint64_t>(st.st_size) / 2) {
      slot_bytes = peek->slot_bytes;
    }
    Result<SwapHeader> best = DataLossError("unset");
    std::string failures;
    Status other_version;
    for (int slot = 0; slot < 2; ++slot) {
      const std::string where = fmt::format("{}, header slot {}", path, slot == 0 ? 'A' : 'B');
      std::vector<std::byte> bytes(slot_bytes);
      SLUICE_RETURN_IF_ERROR(
          PreadFull(fd, bytes.data(), slot_bytes, slot * slot_bytes, &got, path));
      Result<SwapHeader> decoded = DecodeSwapHeader({bytes.data(), got}, where);
      if (!decoded.ok()) {
        if (decoded.status().code() == StatusCode::kFailedPrecondition) {
          other_version = decoded.status();
        }
        failures += (failures.empty() ? "" : "; ") + decoded.status().message();
        continue;
      }
      if (!best.ok() || decoded->generation > best->generation) best = std::move(decoded);
    }
    // A file of another format version is not damaged: say so, naming both versions.
    if (!best.ok() && !other_version.ok()) return other_version;
    if (!best.ok()) {
      return DataLossError("{} has no valid header: {}", path, failures);
    }
    headers.push_back(std::move(best).value());
  }

  // Identity and geometry against the configuration, then across the stripe files.
  const SwapHeader& first = headers.front();
  for (size_t i = 0; i < headers.size(); ++i) {
    const SwapHeader& h = headers[i];
    const std::string& path = file_paths_[i];
    if (h.rank != static_cast<uint32_t>(options_.rank)) {
      return InvalidArgumentError(
          "{}: field 'rank' is {}, but this process is rank {} (a swap "
          "file of another rank)",
          path, h.rank, options_.rank);
    }
    if (h.stripe_count != file_paths_.size()) {
      return InvalidArgumentError(
          "{}: field 'stripe_count' is {}, but nvme_path lists {} "
          "directories (the store was created with a different list)",
          path, h.stripe_count, file_paths_.size());
    }
    if (h.stripe_index != i) {
      return InvalidArgumentError(
          "{}: field 'stripe_index' is {}, but the file is listed at "
          "position {} of nvme_path (keep the original order)",
          path, h.stripe_index, i);
    }
    if (h.stripe_size != options_.stripe_size) {
      return InvalidArgumentError("{}: field 'stripe_size' is {}, but {} is configured", path,
                                  h.stripe_size, options_.stripe_size);
    }
    const std::pair<const char*, bool> same[] = {
        {"store_id", h.store_id == first.store_id},
        {"generation", h.generation == first.generation},
        {"capacity", h.capacity == first.capacity},
        {"slot_bytes", h.slot_bytes == first.slot_bytes},
        {"data_offset", h.data_offset == first.data_offset},
    };
    for (const auto& [field, equal] : same) {
      if (!equal) {
        return DataLossError(
            "{}: field '{}' differs from {} (the stripe files do not belong "
            "together, or the store was not closed cleanly)",
            path, field, file_paths_.front());
      }
    }
    if (h.capacity % SwapRowBytes(h) != 0) {
      return DataLossError("{}: field 'capacity' ({}) is not a whole number of stripe rows", path,
                           h.capacity);
    }
    struct stat st {};
    if (fstat(header_fds_[i], &st) != 0) {
      const int err = errno;
      return ErrnoStatus(err, "fstat of {} failed: {}", path, ErrnoText(err));
    }
    if (static_cast<uint64_t>(st.st_size) < SwapFileBytes(h)) {
      return DataLossError("{} is truncated: {} bytes, but its header describes {} bytes", path,
                           st.st_size, SwapFileBytes(h));
    }
  }

  header_ = first;
  header_.stripe_index = 0;
  header_.extents.clear();
  allocator_.AddSpace(0, header_.capacity);
  for (const SwapExtentRecord& record : first.extents) {
    const std::string where = fmt::format("{}: extent '{}'", file_paths_.front(), record.name);
    if (!IsAligned(record.offset, kIoAlignment) || !IsAligned(record.capacity) ||
        record.capacity == 0 || record.length > record.capacity) {
      return DataLossError("{} has an invalid geometry (offset {}, capacity {}, length {})", where,
                           record.offset, record.capacity, record.length);
    }
    if (record.offset + record.capacity > header_.capacity) {
      return DataLossError("{} ends at {}, past the store capacity {}", where,
                           record.offset + record.capacity, header_.capacity);
    }
    if ((record.flags & kSwapExtentChecksummed) != 0 &&
        (record.checksum_chunk_shift < kMinChecksumChunkShift ||
         record.checksum_chunk_shift > kMaxChecksumChunkShift)) {
      return DataLossError("{} has an invalid 'checksum_chunk_shift' {} (expected {} to {})", where,
                           record.checksum_chunk_shift, kMinChecksumChunkShift,
                           kMaxChecksumChunkShift);
    }
    Status reserved = allocator_.Reserve(record.offset, record.capacity);
    if (!reserved.ok()) return DataLossError("{} overlaps another extent", where);
    if (!extents_.emplace(record.name, Extent{record, 0, {}}).second) {
      return DataLossError("{} appears twice in the extent table", where);
    }
  }
  return OkStatus();
}

Status SwapStore::PersistLocked() {
  SwapHeader header = header_;
  header.generation = header_.generation + 1;
  header.extents.reserve(extents_.size());
  for (const auto& [name, extent] : extents_) header.extents.push_back(extent.record);
  // A failed write leaves that file at the previous generation; the next persist targets the
  // other slot again, so the files converge once writes succeed.
  header_.generation = header.generation;
  const uint64_t slot_offset = (header.generation % 2) * header.slot_bytes;
  for (size_t i = 0; i < header_fds_.size(); ++i) {
    header.stripe_index = static_cast<uint32_t>(i);
    const std::vector<std::byte> bytes = EncodeSwapHeader(header);
    uint64_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = pwrite(header_fds_[i], bytes.data() + written, bytes.size() - written,
                               static_cast<off_t>(slot_offset + written));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        return ErrnoStatus(err, "writing the header of {} (generation {}) failed: {}{}",
                           file_paths_[i], header.generation, ErrnoText(err),
                           internal::SpaceAdvice(err));
      }
      written += static_cast<uint64_t>(n);
    }
  }
  return OkStatus();
}

Status SwapStore::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return FailedPreconditionError("swap store {} is closed", Describe());
  SLUICE_RETURN_IF_ERROR(PersistLocked());
  for (size_t i = 0; i < header_fds_.size(); ++i) {
    if (fdatasync(header_fds_[i]) != 0) {
      const int err = errno;
      return ErrnoStatus(err, "fdatasync of {} failed: {}", file_paths_[i], ErrnoText(err));
    }
  }
  return OkStatus();
}

void SwapStore::Abandon() {
  (void)engine_.Close(data_file_);
  for (int fd : header_fds_) close(fd);
  header_fds_.clear();
  // The creation's error is what the caller reports; a file left behind here is only clutter.
  if (options_.remove_on_close) (void)RemoveScratchFiles();
  ReleaseLocks();
}

void SwapStore::ReleaseLocks() {
  // A scratch store leaves nothing behind, its lock files included (removed while still held, so
  // no second owner can slip in between).
  if (options_.remove_on_close) {
    for (const FileLock& lock : locks_) (void)::unlink(lock.path().c_str());
  }
  locks_.clear();
}

Status SwapStore::RemoveScratchFiles() const {
  Status status;
  for (const std::string& path : file_paths_) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && status.ok()) {
      status = ErrnoStatus(errno, "removing the scratch swap file {} failed: {}", path,
                           ErrnoText(errno));
    }
  }
  return status;
}

Status SwapStore::Close() {
  if (!open_) return OkStatus();
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, extent] : extents_) {
      if (extent.writes_in_flight > 0) {
        return FailedPreconditionError(
            "closing swap store {}: extent '{}' has a write in "
            "flight (wait on its handle first)",
            Describe(), name);
      }
    }
  }
  if (!header_fds_.empty() && !options_.remove_on_close) status = Flush();
  Status closed = engine_.Close(data_file_);
  if (status.ok()) status = closed;
  for (int fd : header_fds_) close(fd);
  header_fds_.clear();
  open_ = false;
  if (options_.remove_on_close) {
    Status removed = RemoveScratchFiles();
    if (status.ok()) status = removed;
  }
  ReleaseLocks();
  return status;
}

}  // namespace sluice::offload
