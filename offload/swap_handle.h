// Completion of a swap-store read or write (offload/swap_store.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offload/aio_handle.h"
#include "runtime/status.h"

namespace sluice::offload {

// Wait() waits for the I/O and then, for reads, finishes verifying the checksum (pieces are
// hashed as they arrive). A write counts, and the extent's length and checksum change, only once
// Wait() returned OK; a handle dropped without Wait() waits in its destructor.
class SwapHandle {
 public:
  // What a verified read checks once its pieces arrive.
  struct Verification {
    uint64_t expected = 0;
    // Per piece, the bytes the checksum covers (the padding after the length is not covered).
    std::vector<std::pair<const std::byte*, uint64_t>> ranges;
    std::string what;  // "swap extent 'x' (offset, length) of <store>", for the error
  };

  SwapHandle() = default;
  static SwapHandle Failed(Status status);
  // `verification` null: no checksum. `finish` (may be empty) runs once, in Wait(), with the
  // I/O's result and returns the handle's result.
  static SwapHandle Make(std::vector<AioHandle> pieces, std::unique_ptr<Verification> verification,
                         std::function<Status(Status)> finish);

  Status Wait();
  // True once the I/O is complete (Wait() then only verifies).
  bool Poll() const;

 private:
  struct Op;
  std::shared_ptr<Op> op_;
};

}  // namespace sluice::offload
