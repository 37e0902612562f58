#include "offload/aio_engine.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "offload/aio_backend.h"
#include "offload/aio_errors.h"
#include "offload/aligned_buffer.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::offload {

using internal::FileEntry;
using internal::FilePart;
using internal::IoChunk;
using internal::IoDirection;

namespace {

// The kernel caps one registered buffer at 1 GiB; larger regions take several slots.
constexpr uint64_t kBufferSlotSpan = 1ull << 30;

std::string_view OpName(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

std::atomic<int64_t> engines_created{0};
std::atomic<int64_t> engines_live{0};

}  // namespace

int64_t AioEngine::created_count() { return engines_created.load(); }
int64_t AioEngine::live_count() { return engines_live.load(); }

AioEngine::AioEngine(const AioOptions& options) : options_(options) {
  shared_.debug_short_io_bytes = options.debug_short_io_bytes;
}

Result<std::unique_ptr<AioEngine>> AioEngine::Create(const AioOptions& options) {
  SLUICE_RETURN_IF_ERROR(ValidateAioOptions(options));
  std::unique_ptr<AioEngine> engine(new AioEngine(options));
  switch (options.backend) {
    case AioBackendKind::kThreadPool:
      engine->backend_ = internal::MakeThreadPoolBackend(options);
      break;
    case AioBackendKind::kIoUring: {
      SLUICE_ASSIGN_OR_RETURN(engine->backend_, internal::MakeUringBackend(options));
      break;
    }
    case AioBackendKind::kAuto: {
      auto uring = internal::MakeUringBackend(options);
      if (uring.ok()) {
        engine->backend_ = std::move(uring).value();
      } else {
        SLUICE_LOG_ONCE(kWarn, "aio",
                        "{}; falling back to pread/pwrite on a thread pool (slower: one syscall "
                        "per chunk). Check `sluice env`.",
                        uring.status().message());
        engine->backend_ = internal::MakeThreadPoolBackend(options);
      }
      break;
    }
  }
  engine->file_slot_used_.assign(static_cast<size_t>(engine->backend_->file_slots()), false);
  engine->buffer_slot_used_.assign(static_cast<size_t>(engine->backend_->buffer_slots()), false);
  SLUICE_LOG(kDebug, "aio", "engine on {}: {}", engine->backend_name(),
             DescribeAioOptions(options));
  engines_created.fetch_add(1);
  engines_live.fetch_add(1);
  engine->counted_ = true;
  return engine;
}

AioEngine::~AioEngine() {
  // Destroying the backend finishes every queued chunk and joins its threads; the files and the
  // shared state are destroyed after it (member order).
  backend_.reset();
  if (counted_) engines_live.fetch_sub(1);
}

std::string_view AioEngine::backend_name() const { return backend_->name(); }

AioEngineStats AioEngine::stats() const {
  AioEngineStats s;
  s.chunks = shared_.chunks.load();
  s.short_transfers = shared_.short_transfers.load();
  s.retries = shared_.retries.load();
  s.bytes_read = shared_.bytes_read.load();
  s.bytes_written = shared_.bytes_written.load();
  s.fixed_buffer_chunks = shared_.fixed_buffer_chunks.load();
  return s;
}

Result<AioFileId> AioEngine::Open(const AioFileOptions& options) {
  if (options.paths.empty()) return InvalidArgumentError("opening a swap file: no path given");
  if (options.paths.size() > 1 && (options.stripe_size == 0 || !IsAligned(options.stripe_size))) {
    return InvalidArgumentError("stripe size must be a positive multiple of {} bytes, got {}",
                                kIoAlignment, options.stripe_size);
  }
  if (!IsAligned(options.base_offset)) {
    return InvalidArgumentError("base offset must be a multiple of {} bytes, got {}", kIoAlignment,
                                options.base_offset);
  }
  auto entry = std::make_unique<FileEntry>();
  entry->stripe_size = options.stripe_size;
  entry->base_offset = options.base_offset;
  for (const std::string& path : options.paths) {
    SLUICE_ASSIGN_OR_RETURN(FilePart part, internal::OpenPart(path, options, options_.direct_io));
    entry->any_direct = entry->any_direct || part.direct;
    entry->parts.push_back(std::move(part));
  }
  if (options.preallocate_bytes > 0) {
    const uint64_t part_bytes = internal::PartBytesFor(*entry, options.preallocate_bytes);
    for (const FilePart& part : entry->parts) {
      SLUICE_RETURN_IF_ERROR(internal::PreallocatePart(part, part_bytes));
    }
  }
  std::lock_guard<std::mutex> lock(files_mu_);
  for (FilePart& part : entry->parts) {
    auto free_slot = std::find(file_slot_used_.begin(), file_slot_used_.end(), false);
    if (free_slot == file_slot_used_.end()) break;
    const int slot = static_cast<int>(free_slot - file_slot_used_.begin());
    if (backend_->RegisterFile(slot, part.fd).ok()) {
      *free_slot = true;
      part.fixed_index = slot;
    }
  }
  const AioFileId id = next_file_++;
  files_.emplace(id, std::move(entry));
  return id;
}

Result<FileEntry*> AioEngine::FindLocked(AioFileId file) const {
  auto it = files_.find(file);
  if (it == files_.end()) {
    return NotFoundError("aio file id {} is not open (closed already, or never opened)", file);
  }
  return it->second.get();
}

void AioEngine::ReleaseFileSlots(FileEntry& entry) {
  for (FilePart& part : entry.parts) {
    if (part.fixed_index < 0) continue;
    backend_->UnregisterFile(part.fixed_index);
    file_slot_used_[static_cast<size_t>(part.fixed_index)] = false;
    part.fixed_index = -1;
  }
}

Status AioEngine::Close(AioFileId file) {
  std::unique_ptr<FileEntry> entry;
  {
    std::lock_guard<std::mutex> lock(files_mu_);
    auto it = files_.find(file);
    if (it == files_.end()) return NotFoundError("aio file id {} is not open", file);
    entry = std::move(it->second);
    files_.erase(it);
  }
  {
    std::unique_lock<std::mutex> lock(shared_.drain_mu);
    shared_.drain_cv.wait(lock, [&] { return entry->inflight.load() == 0; });
  }
  std::lock_guard<std::mutex> lock(files_mu_);
  ReleaseFileSlots(*entry);
  return OkStatus();
}

Status AioEngine::Preallocate(AioFileId file, uint64_t logical_bytes) {
  std::lock_guard<std::mutex> lock(files_mu_);
  SLUICE_ASSIGN_OR_RETURN(FileEntry * entry, FindLocked(file));
  const uint64_t part_bytes = internal::PartBytesFor(*entry, logical_bytes);
  for (const FilePart& part : entry->parts) {
    SLUICE_RETURN_IF_ERROR(internal::PreallocatePart(part, part_bytes));
  }
  return OkStatus();
}

Status AioEngine::Sync(AioFileId file) {
  std::lock_guard<std::mutex> lock(files_mu_);
  SLUICE_ASSIGN_OR_RETURN(FileEntry * entry, FindLocked(file));
  for (const FilePart& part : entry->parts) {
    if (fdatasync(part.fd) != 0) {
      const int err = errno;
      return internal::ErrnoStatus(err, "fdatasync of {} failed: {}", part.path,
                                   internal::ErrnoText(err));
    }
  }
  return OkStatus();
}

Result<bool> AioEngine::IsDirect(AioFileId file) const {
  std::lock_guard<std::mutex> lock(files_mu_);
  SLUICE_ASSIGN_OR_RETURN(FileEntry * entry, FindLocked(file));
  return std::all_of(entry->parts.begin(), entry->parts.end(),
                     [](const FilePart& part) { return part.direct; });
}

Result<std::vector<std::string>> AioEngine::Paths(AioFileId file) const {
  std::lock_guard<std::mutex> lock(files_mu_);
  SLUICE_ASSIGN_OR_RETURN(FileEntry * entry, FindLocked(file));
  std::vector<std::string> paths;
  for (const FilePart& part : entry->parts) paths.push_back(part.path);
  return paths;
}

AioHandle AioEngine::Read(AioFileId file, uint64_t offset, void* buffer, uint64_t length) {
  const IoRequest request{IoOp::kRead, file, offset, buffer, length, nullptr};
  return Submit({&request, 1});
}

AioHandle AioEngine::Write(AioFileId file, uint64_t offset, const void* buffer, uint64_t length) {
  const IoRequest request{IoOp::kWrite, file, offset, const_cast<void*>(buffer), length, nullptr};
  return Submit({&request, 1});
}

int AioEngine::FixedBufferIndex(const char* data, uint64_t length) const {
  for (const Region& region : regions_) {
    if (data < region.begin || data + length > region.begin + region.bytes) continue;
    const uint64_t first = static_cast<uint64_t>(data - region.begin) / kBufferSlotSpan;
    const uint64_t last = static_cast<uint64_t>(data + length - 1 - region.begin) / kBufferSlotSpan;
    return first == last ? region.first_slot + static_cast<int>(first) : -1;
  }
  return -1;
}

AioHandle AioEngine::Submit(std::span<const IoRequest> requests) {
  auto state = std::make_shared<internal::HandleState>();
  state->shared = &shared_;
  std::vector<IoChunk*> chunk_ptrs;
  {
    std::lock_guard<std::mutex> lock(files_mu_);
    // Validate everything first: an invalid request means none is issued.
    std::vector<FileEntry*> entries;
    size_t chunk_count = 0;
    for (const IoRequest& request : requests) {
      auto entry = FindLocked(request.file);
      if (!entry.ok()) {
        return AioHandle::Failed(Status(entry.status()).WithContext(OpName(request.op)));
      }
      const FileEntry& file = **entry;
      const std::string& path = file.parts.front().path;
      if (request.length > 0 && request.buffer == nullptr) {
        return AioHandle::Failed(
            InvalidArgumentError("{} of {}: the buffer is null", OpName(request.op), path));
      }
      if (file.any_direct) {
        if (!IsAligned(request.buffer)) {
          return AioHandle::Failed(InvalidArgumentError(
              "{} of {}: buffer address {} is not {}-byte aligned, which O_DIRECT requires "
              "(allocate I/O buffers with AlignedBuffer or the device's pinned allocator)",
              OpName(request.op), path, request.buffer, kIoAlignment));
        }
        if (!IsAligned(request.offset)) {
          return AioHandle::Failed(InvalidArgumentError(
              "{} of {}: offset {} is not a multiple of {}, which O_DIRECT requires",
              OpName(request.op), path, request.offset, kIoAlignment));
        }
        if (!IsAligned(request.length)) {
          return AioHandle::Failed(InvalidArgumentError(
              "{} of {}: length {} is not a multiple of {}, which O_DIRECT requires (pad the "
              "transfer to the alignment)",
              OpName(request.op), path, request.length, kIoAlignment));
        }
      }
      entries.push_back(*entry);
      // Upper bound on the pieces: block boundaries plus one stripe boundary per stripe.
      uint64_t pieces = (request.length + options_.block_size - 1) / options_.block_size;
      if (file.parts.size() > 1) pieces += request.length / file.stripe_size + 1;
      chunk_count += pieces;
      state->bytes += request.length;
    }
    state->chunks.reserve(chunk_count);
    std::shared_lock<std::shared_mutex> buffers_lock(buffers_mu_);
    for (size_t r = 0; r < requests.size(); ++r) {
      const IoRequest& request = requests[r];
      FileEntry* file = entries[r];
      if (request.observer != nullptr) state->observers.push_back(request.observer);
      uint64_t position = 0;
      while (position < request.length) {
        const internal::StripeLocation where = internal::Locate(*file, request.offset + position);
        const uint64_t piece =
            std::min({options_.block_size, where.contiguous, request.length - position});
        IoChunk& chunk = state->chunks.emplace_back();
        chunk.state = state.get();
        chunk.file = file;
        chunk.part = &file->parts[where.part];
        chunk.direction = request.op == IoOp::kRead ? IoDirection::kRead : IoDirection::kWrite;
        chunk.offset = where.offset;
        chunk.logical_offset = request.offset + position;
        chunk.buffer = static_cast<char*>(request.buffer) + position;
        chunk.length = piece;
        chunk.buffer_index = FixedBufferIndex(chunk.buffer, piece);
        chunk.observer = request.observer.get();
        position += piece;
      }
    }
    if (state->chunks.empty()) {
      state->done.store(true);
      return AioHandle(std::move(state));
    }
    for (IoChunk& chunk : state->chunks) chunk.file->inflight.fetch_add(1);
  }
  uint64_t fixed = 0;
  chunk_ptrs.reserve(state->chunks.size());
  for (IoChunk& chunk : state->chunks) {
    chunk_ptrs.push_back(&chunk);
    if (chunk.buffer_index >= 0) ++fixed;
  }
  shared_.chunks.fetch_add(chunk_ptrs.size(), std::memory_order_relaxed);
  shared_.fixed_buffer_chunks.fetch_add(fixed, std::memory_order_relaxed);
  shared_.outstanding.fetch_add(static_cast<int64_t>(chunk_ptrs.size()));
  state->remaining.store(chunk_ptrs.size());
  state->self = state;
  AioHandle handle(state);
  backend_->Enqueue(chunk_ptrs);
  return handle;
}

void AioEngine::Drain() {
  std::unique_lock<std::mutex> lock(shared_.drain_mu);
  shared_.drain_cv.wait(lock, [&] { return shared_.outstanding.load() == 0; });
}

bool AioEngine::RegisterBuffer(void* data, uint64_t bytes) {
  if (!options_.register_buffers || bytes == 0) return false;
  const int needed = static_cast<int>((bytes + kBufferSlotSpan - 1) / kBufferSlotSpan);
  std::unique_lock<std::shared_mutex> lock(buffers_mu_);
  if (buffer_slot_used_.empty()) {
    SLUICE_LOG_ONCE(kDebug, "aio", "the {} backend has no registered buffers", backend_name());
    return false;
  }
  // First run of `needed` free consecutive slots.
  int first = -1;
  for (int i = 0, run = 0; i < static_cast<int>(buffer_slot_used_.size()); ++i) {
    run = buffer_slot_used_[static_cast<size_t>(i)] ? 0 : run + 1;
    if (run == needed) {
      first = i - needed + 1;
      break;
    }
  }
  if (first < 0) {
    SLUICE_LOG_ONCE(kWarn, "aio",
                    "no free io_uring buffer slots for a {}-byte buffer; it is used unregistered",
                    bytes);
    return false;
  }
  std::vector<iovec> pieces;
  for (uint64_t at = 0; at < bytes; at += kBufferSlotSpan) {
    pieces.push_back({static_cast<char*>(data) + at, std::min(kBufferSlotSpan, bytes - at)});
  }
  Status status = backend_->RegisterBuffers(first, pieces);
  if (!status.ok()) {
    SLUICE_LOG_ONCE(kWarn, "aio",
                    "{} for a {}-byte buffer; using it unregistered (each I/O then pins its "
                    "pages; raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK to register)",
                    status.message(), bytes);
    return false;
  }
  for (int i = 0; i < needed; ++i) buffer_slot_used_[static_cast<size_t>(first + i)] = true;
  regions_.push_back({static_cast<char*>(data), bytes, first, needed});
  return true;
}

void AioEngine::UnregisterBuffer(void* data) {
  std::unique_lock<std::shared_mutex> lock(buffers_mu_);
  auto it = std::find_if(regions_.begin(), regions_.end(),
                         [&](const Region& region) { return region.begin == data; });
  if (it == regions_.end()) return;
  backend_->UnregisterBuffers(it->first_slot, it->slots);
  for (int i = 0; i < it->slots; ++i) {
    buffer_slot_used_[static_cast<size_t>(it->first_slot + i)] = false;
  }
  regions_.erase(it);
}

}  // namespace sluice::offload
