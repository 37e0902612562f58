#include "offload/extent_allocator.h"

#include <algorithm>

#include "offload/aligned_buffer.h"

namespace sluice::offload {

void ExtentAllocator::AddSpace(uint64_t offset, uint64_t bytes) { Free(offset, bytes); }

std::optional<uint64_t> ExtentAllocator::Allocate(uint64_t bytes) {
  const uint64_t size = AlignUp(bytes, alignment_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = AlignUp(it->first, alignment_);
    const uint64_t end = it->first + it->second;
    if (start + size > end) continue;
    const uint64_t range_start = it->first;
    free_.erase(it);
    if (start > range_start) free_.emplace(range_start, start - range_start);
    if (start + size < end) free_.emplace(start + size, end - (start + size));
    return start;
  }
  return std::nullopt;
}

Status ExtentAllocator::Reserve(uint64_t offset, uint64_t bytes) {
  auto it = free_.upper_bound(offset);
  if (it == free_.begin()) {
    return DataLossError("range [{}, {}) is not free", offset, offset + bytes);
  }
  --it;
  const uint64_t start = it->first;
  const uint64_t end = start + it->second;
  if (offset < start || offset + bytes > end) {
    return DataLossError("range [{}, {}) is not free", offset, offset + bytes);
  }
  free_.erase(it);
  if (offset > start) free_.emplace(start, offset - start);
  if (offset + bytes < end) free_.emplace(offset + bytes, end - (offset + bytes));
  return OkStatus();
}

void ExtentAllocator::Free(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  uint64_t start = offset;
  uint64_t end = offset + bytes;
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    SLUICE_CHECK_LE(prev->first + prev->second, start) << "double free of a swap extent";
    if (prev->first + prev->second == start) {
      start = prev->first;
      free_.erase(prev);
    }
  }
  if (next != free_.end()) {
    SLUICE_CHECK_LE(end, next->first) << "double free of a swap extent";
    if (next->first == end) {
      end = next->first + next->second;
      free_.erase(next);
    }
  }
  free_.emplace(start, end - start);
}

uint64_t ExtentAllocator::free_bytes() const {
  uint64_t total = 0;
  for (const auto& [offset, length] : free_) total += length;
  return total;
}

uint64_t ExtentAllocator::largest_free() const {
  uint64_t largest = 0;
  for (const auto& [offset, length] : free_) largest = std::max(largest, length);
  return largest;
}

uint64_t ExtentAllocator::free_ending_at(uint64_t end) const {
  if (free_.empty()) return 0;
  const auto& [offset, length] = *free_.rbegin();
  return offset + length == end ? length : 0;
}

}  // namespace sluice::offload
