#include "kernels/cpu/adam_parallel.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cpu/thread_binding.h"

namespace sluice::kernels {
namespace {

struct Partition {
  size_t count;
  size_t head;   // elements before the first 64-byte boundary of the anchor
  size_t tiles;  // whole or partial tiles after the head

  // Start of part i of n (i = n gives count).
  size_t Boundary(int i, int n) const {
    if (i <= 0) return 0;
    if (i >= n) return count;
    return std::min(count, head + tiles * static_cast<size_t>(i) / n * kAdamTileElements);
  }
};

Partition MakePartition(size_t count, const void* anchor) {
  uintptr_t address = reinterpret_cast<uintptr_t>(anchor);
  size_t head = address % 4 == 0 ? ((64 - address % 64) % 64) / 4 : 0;
  head = std::min(head, count);
  size_t tiles = (count - head + kAdamTileElements - 1) / kAdamTileElements;
  return Partition{count, head, std::max<size_t>(tiles, 1)};
}

}  // namespace

int AdamThreadCount(const AdamThreading& threading) {
  if (threading.num_threads > 0) return threading.num_threads;
  if (threading.cpuset != nullptr) return std::max(1, hwloc_bitmap_weight(threading.cpuset));
  return std::max(1, omp_get_max_threads());
}

std::string AdamThreadingError(const AdamThreading& threading) {
  if (threading.num_threads < 0) {
    return "num_threads = " + std::to_string(threading.num_threads) +
           " must be >= 0 (0 picks one per CPU)";
  }
  if (threading.cpuset != nullptr) return CpusetError(threading.cpuset);
  return "";
}

void ForEachAdamRange(size_t count, const void* anchor, const AdamThreading& threading,
                      const std::function<void(size_t begin, size_t end)>& fn) {
  if (count == 0) return;
  Partition partition = MakePartition(count, anchor);
  size_t wanted = std::min<size_t>(AdamThreadCount(threading), partition.tiles);
  if (wanted <= 1) {
    ScopedThreadBinding binding(threading.cpuset, 0);
    fn(0, count);
    return;
  }
#pragma omp parallel num_threads(static_cast <int>(wanted))
  {
    // The runtime may grant fewer threads than asked (nested regions, limits): partition over
    // the team actually running so every element is still covered exactly once.
    int team = omp_get_num_threads();
    int index = omp_get_thread_num();
    size_t begin = partition.Boundary(index, team);
    size_t end = partition.Boundary(index + 1, team);
    if (begin < end) {
      ScopedThreadBinding binding(threading.cpuset, index);
      fn(begin, end);
    }
  }
}

}  // namespace sluice::kernels
