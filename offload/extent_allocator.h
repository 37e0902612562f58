// First-fit allocator of aligned extents in a linear space that can grow. Free ranges are kept
// coalesced, so freeing and reallocating the same sizes (one optimizer sub-group after another)
// does not fragment the space.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "runtime/status.h"

namespace sluice::offload {

class ExtentAllocator {
 public:
  explicit ExtentAllocator(uint64_t alignment) : alignment_(alignment) {}

  // Adds [offset, offset + bytes) to the free space (initial capacity or growth).
  void AddSpace(uint64_t offset, uint64_t bytes);
  // Lowest free offset with room for `bytes` (rounded up to the alignment), or nullopt.
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Marks a known range used (rebuilding from a stored extent table). Fails when the range is
  // not entirely free: the table overlaps itself or exceeds the capacity.
  Status Reserve(uint64_t offset, uint64_t bytes);
  void Free(uint64_t offset, uint64_t bytes);

  uint64_t free_bytes() const;
  uint64_t largest_free() const;
  // Length of the free range that ends exactly at `end` (the space's current end), or 0: growing
  // the space at `end` extends that range, so an allocation needs only what it lacks.
  uint64_t free_ending_at(uint64_t end) const;

 private:
  uint64_t alignment_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, disjoint and not adjacent
};

}  // namespace sluice::offload
