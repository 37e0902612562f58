// Per-stream scratch memory of an ops backend (see "Scratch memory" in ops_backend.h): device
// memory from the Device, charged to the ledger as `buffers`, grown on demand and never shared
// between streams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "runtime/device.h"

namespace sluice::ops {

class ScratchPool {
 public:
  explicit ScratchPool(Device& device) : device_(device) {}
  ~ScratchPool() = default;  // the buffers free themselves on their streams

  // At least `bytes` of device memory for work enqueued on `stream` from now on, until the next
  // Get for the same stream (which may replace it: the old buffer is then freed on `stream`, after
  // the work already enqueued there). nullptr for bytes == 0.
  Result<void*> Get(Stream& stream, size_t bytes);
  void Release(Stream& stream);
  // Bytes held for all streams.
  size_t held_bytes() const;

 private:
  Device& device_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, DeviceBuffer> buffers_;  // by stream id
};

}  // namespace sluice::ops
