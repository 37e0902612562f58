// A completion handle for one request or one batch of requests submitted to the AioEngine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "runtime/status.h"

namespace sluice::offload {

namespace internal {
struct HandleState;
}

class AioHandle {
 public:
  // A handle with nothing to do: Poll() is true and Wait() is OK.
  AioHandle() = default;
  explicit AioHandle(std::shared_ptr<internal::HandleState> state);
  // A handle that failed before any I/O was issued (bad arguments, unknown file).
  static AioHandle Failed(Status status);

  // Blocks (sleeping, not spinning) until every chunk of the request completed; returns the
  // first error, which names the file, offset, length and errno. May be called repeatedly.
  Status Wait() const;
  // True once Wait() would return without blocking.
  bool Poll() const;
  // Bytes the request asked for.
  uint64_t bytes() const;

  // Dropping a handle without waiting is allowed: the I/O still completes (keep the buffer alive
  // until it has, e.g. by waiting on AioEngine::Drain).

 private:
  std::shared_ptr<internal::HandleState> state_;
};

// Waits for all handles; returns the first error.
Status WaitAll(std::span<const AioHandle> handles);

}  // namespace sluice::offload
