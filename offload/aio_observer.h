// A per-request hook the AioEngine calls as each block_size piece of the request finishes, so
// work on the data (checksumming) can follow the I/O piece by piece instead of waiting for the
// whole request, and can run on the backend threads, which are otherwise idle while the device
// works.
#pragma once

#include <cstdint>

namespace sluice::offload {

class ChunkObserver {
 public:
  virtual ~ChunkObserver() = default;
  // [data, data + bytes) of the request's buffer has finished: transferred in full (`ok`), or
  // failed or skipped (`!ok`, the handle reports why). Called exactly once per piece, on the
  // backend thread that finished it, before the request's handle completes; the pieces of one
  // request may finish concurrently on several threads and in any order. Keep it cheap: it
  // runs before the backend gets to the next completion.
  virtual void ChunkFinished(const char* data, uint64_t bytes, bool ok) = 0;
  // Called after ChunkFinished() of a batch of pieces (with the ring refilled), once per piece
  // that transferred `bytes`: room for work proportional to the I/O just done.
  virtual void Work(uint64_t bytes) {}
};

}  // namespace sluice::offload
