// Engine buffers start at zero (shards with padding, gradient accumulators, Adam moments): one
// allocation path for all of them, so a failure always names the buffer.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <string_view>

#include "runtime/device.h"
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice::zero {

// `what` names the buffer in the error ("the fp32 gradient shard").
inline Result<DeviceBuffer> AllocateZeroed(Device& device, size_t bytes, MemoryCategory category,
                                           std::string_view what) {
  Result<DeviceBuffer> buffer = device.Allocate(bytes, category);
  if (!buffer.ok()) return Status(buffer.status()).WithContext(fmt::format("allocating {}", what));
  if (!buffer->empty()) std::memset(buffer->data(), 0, buffer->size());
  return buffer;
}

}  // namespace sluice::zero
