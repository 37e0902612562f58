// Pinned host memory for the CPU backend: page-aligned anonymous mappings, locked in RAM with
// mlock when RLIMIT_MEMLOCK allows (otherwise they stay pageable and a warning is logged once).
#pragma once

#include <cstddef>

#include "runtime/status.h"

namespace sluice {

struct PinnedRegion {
  void* data = nullptr;
  size_t length = 0;  // bytes mapped: the request rounded up to whole pages
  bool locked = false;
};

// bytes > 0.
Result<PinnedRegion> MapPinnedHostMemory(size_t bytes);
void UnmapPinnedHostMemory(void* data, size_t length);

}  // namespace sluice
