// Completion of a swap-store read or write (offload/swap_store.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_handle.h"
#include "offload/chunked_checksum.h"
#include "runtime/status.h"

namespace sluice::offload {

// Wait() waits for the I/O while helping to hash the checksum chunks that have arrived (the
// backend threads hash them too, as their pieces finish), then verifies a read. A write counts,
// and the extent's length and checksum change, only once Wait() returned OK; a handle dropped
// without Wait() waits in its destructor.
class SwapHandle {
 public:
  // What a verified read compares once every chunk is hashed.
  struct Verification {
    uint64_t expected = 0;
    // The chunk checksums of the last write, when this process wrote it (not persisted): a
    // mismatch then names the chunk. Empty: only the extent is named.
    std::vector<uint64_t> expected_chunks;
    std::string what;  // "swap extent 'x' (offset, length) of <store>", for the error
  };
  // Runs once, in Wait(), with the I/O's result and the finished checksum (null when not
  // checksummed); returns the handle's result.
  using Finish = std::function<Status(Status, const ChunkedChecksum*)>;

  SwapHandle() = default;
  static SwapHandle Failed(Status status);
  // `checksum` (may be null) observes `io`; `verification` (may be null) checks a read.
  static SwapHandle Make(AioHandle io, std::shared_ptr<ChunkedChecksum> checksum,
                         std::unique_ptr<Verification> verification, Finish finish);

  Status Wait();
  // True once the I/O is complete (Wait() then only finishes hashing and verifies).
  bool Poll() const;

 private:
  struct Op;
  std::shared_ptr<Op> op_;
};

}  // namespace sluice::offload
