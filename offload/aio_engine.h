// The NVMe I/O engine: io_uring (or a pread/pwrite thread pool where io_uring is unavailable)
// over O_DIRECT files that stay open and preallocated. Requests are split into
// aio.block_size chunks, spread over aio.intra_op_parallelism rings of aio.queue_depth entries
// each, and every completion is checked: a short transfer is resubmitted for the remainder, an
// error becomes a Status naming the file, offset, length and errno.
//
//   auto engine = AioEngine::Create(options);
//   auto file = engine->Open({.paths = {"/nvme0/swap", "/nvme1/swap"}, .preallocate_bytes = n});
//   AioHandle h = engine->Write(*file, 0, buffer, bytes);   // returns at once
//   ...
//   SLUICE_RETURN_IF_ERROR(h.Wait());
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "offload/aio_chunk.h"
#include "offload/aio_file.h"
#include "offload/aio_handle.h"
#include "offload/aio_observer.h"
#include "offload/aio_options.h"
#include "runtime/status.h"

namespace sluice::offload {

namespace internal {
class IoBackend;
}

using AioFileId = uint32_t;

enum class IoOp : uint8_t { kRead, kWrite };

struct IoRequest {
  IoOp op = IoOp::kRead;
  AioFileId file = 0;
  uint64_t offset = 0;  // logical offset in the (possibly striped) file
  void* buffer = nullptr;
  uint64_t length = 0;
  // Optional: told about each piece as it finishes (kept alive until the handle completes).
  std::shared_ptr<ChunkObserver> observer;
};

struct AioEngineStats {
  uint64_t chunks = 0;           // block-size pieces submitted
  uint64_t short_transfers = 0;  // completions that moved less than asked (resubmitted)
  uint64_t retries = 0;          // EAGAIN/EINTR resubmissions
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t fixed_buffer_chunks = 0;  // chunks that used an io_uring registered buffer
};

class AioEngine {
 public:
  static Result<std::unique_ptr<AioEngine>> Create(const AioOptions& options);
  // Finishes every request in flight, then closes the files.
  ~AioEngine();

  AioEngine(const AioEngine&) = delete;
  AioEngine& operator=(const AioEngine&) = delete;

  // Opens (creating by default) a file, or a striped set of files, and preallocates it.
  Result<AioFileId> Open(const AioFileOptions& options);
  // Waits for the file's I/O in flight, then closes it.
  Status Close(AioFileId file);
  // Grows every part so that logical bytes [0, logical_bytes) are allocated on disk.
  Status Preallocate(AioFileId file, uint64_t logical_bytes);
  Status Sync(AioFileId file);  // fdatasync every part
  // Whether every part of the file uses O_DIRECT.
  Result<bool> IsDirect(AioFileId file) const;
  Result<std::vector<std::string>> Paths(AioFileId file) const;

  // Asynchronous I/O. With O_DIRECT, buffer, offset and length must be multiples of 4096
  // (InvalidArgument naming which otherwise). The buffer must stay alive until the handle is done.
  // A request is done once every block of it finished or was skipped: after the first failed
  // block the blocks not yet started are skipped, so a failed write leaves its range undefined
  // (the data outside it is untouched) and a failed read its buffer.
  AioHandle Read(AioFileId file, uint64_t offset, void* buffer, uint64_t length);
  AioHandle Write(AioFileId file, uint64_t offset, const void* buffer, uint64_t length);
  // Several requests, submitted together, completing as one handle. If any request is invalid,
  // none is issued.
  AioHandle Submit(std::span<const IoRequest> requests);

  // Waits until no request is in flight.
  void Drain();

  // Registers [data, data+bytes) with every ring as fixed buffers (no per-I/O page pinning).
  // Best effort: returns false (and logs why) when the backend or the kernel refuses; the memory
  // can still be used for I/O. No I/O may be in flight on a buffer being unregistered.
  bool RegisterBuffer(void* data, uint64_t bytes);
  void UnregisterBuffer(void* data);

  std::string_view backend_name() const;
  const AioOptions& options() const { return options_; }
  AioEngineStats stats() const;

  // Engines made by Create in this process since it started, and those alive now: every engine
  // owns its rings and completion threads, so a rank should hold one (offload::RankTiers), and
  // tests hold it to that.
  static int64_t created_count();
  static int64_t live_count();

 private:
  struct Region {
    char* begin = nullptr;
    uint64_t bytes = 0;
    int first_slot = 0;
    int slots = 0;
  };

  explicit AioEngine(const AioOptions& options);
  Result<internal::FileEntry*> FindLocked(AioFileId file) const;
  int FixedBufferIndex(const char* data, uint64_t length) const;
  void ReleaseFileSlots(internal::FileEntry& entry);

  const AioOptions options_;
  internal::EngineShared shared_;  // declared before backend_: outlives its threads

  mutable std::mutex files_mu_;
  std::map<AioFileId, std::unique_ptr<internal::FileEntry>> files_;
  AioFileId next_file_ = 1;
  std::vector<bool> file_slot_used_;

  mutable std::shared_mutex buffers_mu_;
  std::vector<Region> regions_;
  std::vector<bool> buffer_slot_used_;

  std::unique_ptr<internal::IoBackend> backend_;
  bool counted_ = false;  // in created_count() / live_count(): Create finished
};

}  // namespace sluice::offload
