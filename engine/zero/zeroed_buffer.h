// Engine buffers start at zero (shards with padding, gradient accumulators, Adam moments): one
// allocation path for all of them, so a failure always names the buffer. The zeroing is device
// work on a stream (the host never writes device memory), finished when the call returns, so any
// stream may use the buffer at once.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <string_view>

#include "runtime/device.h"
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice::zero {

// Zeroes `buffer` on `stream` and synchronizes it.
inline Status ZeroOnStream(Stream& stream, const DeviceBuffer& buffer, std::string_view what) {
  if (buffer.empty()) return OkStatus();
  Status zeroed = stream.device().MemsetAsync(buffer.data(), 0, buffer.size(), stream);
  if (zeroed.ok()) zeroed = stream.Synchronize();
  if (!zeroed.ok()) return std::move(zeroed).WithContext(fmt::format("zeroing {}", what));
  return OkStatus();
}

// `what` names the buffer in the error ("the fp32 gradient shard"). Zeroed on `stream`, which
// is synchronized.
inline Result<DeviceBuffer> AllocateZeroed(Stream& stream, size_t bytes, MemoryCategory category,
                                           std::string_view what) {
  Device& device = stream.device();
  Result<DeviceBuffer> buffer = device.Allocate(bytes, category);
  if (!buffer.ok()) return Status(buffer.status()).WithContext(fmt::format("allocating {}", what));
  SLUICE_RETURN_IF_ERROR(ZeroOnStream(stream, *buffer, what));
  return buffer;
}

}  // namespace sluice::zero
