// Internal to the engine: the unit of work a backend executes (one block_size piece of a
// request), the shared state of a handle, and the rules for what a completion means.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "offload/aio_file.h"
#include "offload/aio_observer.h"
#include "runtime/status.h"

namespace sluice::offload::internal {

enum class IoDirection : uint8_t { kRead, kWrite };

// Engine-wide state that chunks report into; outlives the backends.
struct EngineShared {
  uint64_t debug_short_io_bytes = 0;
  std::atomic<uint64_t> chunks{0};
  std::atomic<uint64_t> short_transfers{0};
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> bytes_read{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> fixed_buffer_chunks{0};
  // Close() and Drain() wait on these.
  std::mutex drain_mu;
  std::condition_variable drain_cv;
  std::atomic<int64_t> outstanding{0};
};

struct HandleState;

struct IoChunk {
  HandleState* state = nullptr;
  FileEntry* file = nullptr;
  const FilePart* part = nullptr;
  IoDirection direction = IoDirection::kRead;
  uint64_t offset = 0;          // in the part's file
  uint64_t logical_offset = 0;  // in the logical (striped) file, for messages
  char* buffer = nullptr;
  uint64_t length = 0;
  uint64_t done = 0;                  // bytes already transferred (short completions)
  int buffer_index = -1;              // io_uring fixed-buffer slot, or -1
  int attempts = 0;                   // EAGAIN/EINTR retries
  ChunkObserver* observer = nullptr;  // owned by the handle state's `observers`
};

struct HandleState {
  std::vector<IoChunk> chunks;
  EngineShared* shared = nullptr;
  uint64_t bytes = 0;
  std::atomic<size_t> remaining{0};
  std::atomic<bool> failed{false};  // later chunks of a failed request are skipped
  std::atomic<bool> done{false};
  std::mutex mu;
  std::condition_variable cv;
  Status status;
  std::vector<std::shared_ptr<ChunkObserver>> observers;
  // Keeps the state alive while chunks are in flight, even if every AioHandle was dropped.
  std::shared_ptr<HandleState> self;
};

enum class ChunkStep { kDone, kResubmit, kFailed };

// Applies a completion result (bytes moved, or -errno) to the chunk: a full transfer is done,
// a short one advances `done` and asks for the remainder, EAGAIN/EINTR retry, the rest fail
// with `*error` naming file, offset, length and errno. EOF inside the range is OutOfRange.
ChunkStep AccountTransfer(IoChunk& chunk, int64_t result, Status* error);

// Reports the chunk finished (OK or error), telling its observer first. The chunk, its handle
// state and its file may be destroyed by the time this returns; callers must not touch them
// afterwards.
void CompleteChunk(IoChunk& chunk, Status status);
// The same for a batch: every observer hears of its piece first (ChunkFinished), then each gets
// its Work() turn, then the chunks are counted finished.
void CompleteChunks(std::span<std::pair<IoChunk*, Status>> finished);

// Finishes a chunk of a request that already failed, without doing its I/O.
void SkipChunk(IoChunk& chunk);

}  // namespace sluice::offload::internal
