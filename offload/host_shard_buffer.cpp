#include "offload/host_shard_buffer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "runtime/foreign_call.h"

namespace sluice::offload {

void HostShardBuffer::Free::operator()(void* p) const { std::free(p); }

Result<HostShardBuffer> HostShardBuffer::Allocate(size_t bytes, MemoryCategory category,
                                                  const char* what) {
  HostShardBuffer buffer;
  if (bytes == 0) return buffer;
  constexpr size_t kPage = 4096;
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  void* memory = std::aligned_alloc(kPage, rounded);
  if (memory == nullptr) {
    return ResourceExhaustedError(
        "cannot allocate {} bytes of host memory for {} ({}); lower device.host_memory_limit "
        "demands (more ranks, zero_optimization.offload_*.device nvme)",
        rounded, what, internal::ErrnoText(errno));
  }
  std::memset(memory, 0, rounded);
  buffer.data_.reset(memory);
  buffer.size_ = bytes;
  buffer.charge_ = MemoryCharge(MemoryTier::kHost, category, rounded);
  return buffer;
}

}  // namespace sluice::offload
