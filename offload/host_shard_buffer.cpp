#include "offload/host_shard_buffer.h"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/foreign_call.h"

namespace sluice::offload {

void HostShardBuffer::Free::operator()(void* p) const { std::free(p); }

void HostShardBuffer::Zero(int threads) {
  constexpr size_t kChunk = size_t{1} << 20;
  const auto chunks = static_cast<int64_t>((size_ + kChunk - 1) / kChunk);
  auto* bytes = static_cast<uint8_t*>(data());
  if (threads <= 0) threads = omp_get_max_threads();
#pragma omp parallel for num_threads(threads) if (threads > 1 && chunks > 1) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memset(bytes + begin, 0, std::min(kChunk, size_ - begin));
  }
}

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
