#include "runtime/ops/scratch_pool.h"

#include <algorithm>

namespace sluice::ops {

Result<void*> ScratchPool::Get(Stream& stream, size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  DeviceBuffer& held = buffers_[stream.id()];
  if (held.size() >= bytes) return held.data();
  // Grow by at least half again, so that shapes creeping up one step at a time do not reallocate
  // at every op.
  const size_t grown = std::max(bytes, held.size() + held.size() / 2);
  if (!held.empty()) held.FreeAsync(stream);
  Result<DeviceBuffer> fresh = device_.AllocateAsync(grown, MemoryCategory::kBuffers, stream);
  if (!fresh.ok()) {
    return Status(fresh.status()).WithContext(
        fmt::format("ops scratch for stream {} ({} bytes)", stream.name(), grown));
  }
  held = std::move(*fresh);
  return held.data();
}

void ScratchPool::Release(Stream& stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(stream.id());
  if (it == buffers_.end()) return;
  if (!it->second.empty()) it->second.FreeAsync(stream);
  buffers_.erase(it);
}

size_t ScratchPool::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [id, buffer] : buffers_) total += buffer.size();
  return total;
}

}  // namespace sluice::ops
