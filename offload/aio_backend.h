// Internal to the engine: what executes chunks. Two implementations: io_uring rings
// (aio_uring_backend.cpp) and the pread/pwrite thread pool (aio_fallback.cpp).
#pragma once

#include <sys/uio.h>

#include <memory>
#include <span>
#include <string_view>

#include "offload/aio_chunk.h"
#include "offload/aio_options.h"
#include "runtime/status.h"

namespace sluice::offload::internal {

class IoBackend {
 public:
  // Destruction finishes every chunk already enqueued, then joins the backend's threads.
  virtual ~IoBackend() = default;

  virtual std::string_view name() const = 0;

  // Takes the chunks; each is eventually finished with CompleteChunk or SkipChunk, on a backend
  // thread or (for chunks of an already failed request) on the calling thread.
  virtual void Enqueue(std::span<IoChunk* const> chunks) = 0;

  // Fixed (pre-registered) buffers and files, io_uring only. Slots are the same in every ring.
  virtual int buffer_slots() const { return 0; }
  virtual Status RegisterBuffers(int first_slot, std::span<const iovec> pieces) {
    return UnimplementedError("the {} backend has no registered buffers", name());
  }
  virtual void UnregisterBuffers(int first_slot, int count) {}
  virtual int file_slots() const { return 0; }
  virtual Status RegisterFile(int slot, int fd) {
    return UnimplementedError("the {} backend has no registered files", name());
  }
  virtual void UnregisterFile(int slot) {}
};

// io_uring: `intra_op_parallelism` rings of `queue_depth` entries, each with a completion thread
// that sleeps in io_uring_wait_cqe. Fails (Unavailable) where io_uring cannot be set up.
Result<std::unique_ptr<IoBackend>> MakeUringBackend(const AioOptions& options);

// pread/pwrite on `intra_op_parallelism * queue_depth` worker threads (at most 64).
std::unique_ptr<IoBackend> MakeThreadPoolBackend(const AioOptions& options);

}  // namespace sluice::offload::internal
