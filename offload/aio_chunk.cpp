#include "offload/aio_chunk.h"

#include <cerrno>
#include <string_view>
#include <utility>

#include "offload/aio_errors.h"
#include "offload/aligned_buffer.h"

namespace sluice::offload::internal {
namespace {

constexpr int kMaxRetries = 16;

std::string_view Verb(IoDirection direction) {
  return direction == IoDirection::kRead ? "read" : "write";
}

std::string Where(const IoChunk& chunk, uint64_t offset) {
  if (chunk.file->parts.size() == 1) return fmt::format("offset {}", offset);
  return fmt::format("offset {} (logical offset {} of the striped space)", offset,
                     chunk.logical_offset + (offset - chunk.offset));
}

}  // namespace

ChunkStep AccountTransfer(IoChunk& chunk, int64_t result, Status* error) {
  const uint64_t position = chunk.offset + chunk.done;
  const uint64_t remaining = chunk.length - chunk.done;
  if (result < 0) {
    const int err = static_cast<int>(-result);
    if ((err == EAGAIN || err == EINTR) && chunk.attempts < kMaxRetries) {
      ++chunk.attempts;
      chunk.state->shared->retries.fetch_add(1, std::memory_order_relaxed);
      return ChunkStep::kResubmit;
    }
    *error = ErrnoStatus(err, "{} of {} bytes at {} of {} failed: {}{}", Verb(chunk.direction),
                         remaining, Where(chunk, position), chunk.part->path, ErrnoText(err),
                         SpaceAdvice(err));
    return ChunkStep::kFailed;
  }
  uint64_t moved = static_cast<uint64_t>(result);
  const uint64_t limit = chunk.state->shared->debug_short_io_bytes;
  if (limit != 0 && moved > limit) moved = limit;
  if (moved >= remaining) {
    chunk.done = chunk.length;
    return ChunkStep::kDone;
  }
  if (moved == 0) {
    if (chunk.direction == IoDirection::kRead) {
      *error = OutOfRangeError(
          "read past the end of {}: {} bytes requested at {}, but the file ends there (a "
          "truncated swap file, or a read beyond what was written)",
          chunk.part->path, remaining, Where(chunk, position));
    } else {
      *error = IoError("write of {} bytes at {} of {} made no progress (the kernel returned 0)",
                       remaining, Where(chunk, position), chunk.part->path);
    }
    return ChunkStep::kFailed;
  }
  chunk.done += moved;
  chunk.state->shared->short_transfers.fetch_add(1, std::memory_order_relaxed);
  if (chunk.part->direct && !IsAligned(chunk.done)) {
    // O_DIRECT cannot continue at an unaligned offset. A direct read only stops short at EOF.
    const uint64_t stop = chunk.offset + chunk.done;
    if (chunk.direction == IoDirection::kRead) {
      *error = OutOfRangeError(
          "read past the end of {}: {} bytes requested at {}, but the file ends at offset {}",
          chunk.part->path, remaining, Where(chunk, position), stop);
    } else {
      *error = IoError(
          "short write to {}: {} of {} bytes written at {}, stopping at unaligned "
          "offset {}",
          chunk.part->path, moved, remaining, Where(chunk, position), stop);
    }
    return ChunkStep::kFailed;
  }
  return ChunkStep::kResubmit;
}

namespace {

// Counts the chunk as finished. After the last decrements the file may be closed and the handle
// state freed: only the engine's shared state (which outlives every backend thread) is touched.
void FinishChunk(IoChunk& chunk) {
  HandleState* state = chunk.state;
  EngineShared* shared = state->shared;
  const bool file_idle = chunk.file->inflight.fetch_sub(1, std::memory_order_acq_rel) == 1;
  std::shared_ptr<HandleState> keep;
  if (state->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    keep = std::move(state->self);
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->done.store(true, std::memory_order_release);
    }
    state->cv.notify_all();
  }
  const bool engine_idle = shared->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1;
  if (file_idle || engine_idle) {
    std::lock_guard<std::mutex> lock(shared->drain_mu);
    shared->drain_cv.notify_all();
  }
}

void Account(IoChunk& chunk, Status status) {
  HandleState* state = chunk.state;
  if (status.ok()) {
    auto& counter = chunk.direction == IoDirection::kRead ? state->shared->bytes_read
                                                          : state->shared->bytes_written;
    counter.fetch_add(chunk.length, std::memory_order_relaxed);
  } else {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->status.ok()) state->status = std::move(status);
    state->failed.store(true, std::memory_order_release);
  }
  FinishChunk(chunk);
}

}  // namespace

void CompleteChunk(IoChunk& chunk, Status status) {
  std::pair<IoChunk*, Status> one(&chunk, std::move(status));
  CompleteChunks({&one, 1});
}

void CompleteChunks(std::span<std::pair<IoChunk*, Status>> finished) {
  for (auto& [chunk, status] : finished) {
    if (chunk->observer != nullptr) {
      chunk->observer->ChunkFinished(chunk->buffer, chunk->length, status.ok());
    }
  }
  for (auto& [chunk, status] : finished) {
    if (chunk->observer != nullptr && status.ok()) chunk->observer->Work(chunk->length);
  }
  for (auto& [chunk, status] : finished) Account(*chunk, std::move(status));
}

// The request's first error is already recorded; this chunk adds nothing but its completion.
void SkipChunk(IoChunk& chunk) {
  if (chunk.observer != nullptr) chunk.observer->ChunkFinished(chunk.buffer, chunk.length, false);
  FinishChunk(chunk);
}

}  // namespace sluice::offload::internal
