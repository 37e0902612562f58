// How CPU Adam spreads one call over threads: a static partition of the flat range into one
// contiguous run of whole tiles per thread, so each thread streams its own memory and, call after
// call, touches the same pages (first-touch NUMA placement stays right). The kernel, its memory
// probe and the benchmark's scalar baseline all run through it, so they are compared like for like.
#pragma once

#include <hwloc.h>

#include <cstddef>
#include <functional>
#include <string>

namespace sluice::kernels {

// 16 Ki fp32 elements = 64 KiB per stream: big enough that a thread's run is long, small enough
// that a million-element shard still spreads over many cores.
inline constexpr size_t kAdamTileElements = 16384;

struct AdamThreading {
  // 0: one thread per CPU of `cpuset` when given, else OpenMP's default (all cores).
  int num_threads = 0;
  // When set, thread i is bound to the (i mod weight)-th CPU of this set for the call.
  hwloc_const_cpuset_t cpuset = nullptr;
};

// The number of threads a call with `threading` uses at most.
int AdamThreadCount(const AdamThreading& threading);

// Empty when `threading` is usable, else why not (negative count, bad cpuset).
std::string AdamThreadingError(const AdamThreading& threading);

// Calls fn(begin, end) once per thread over a partition of [0, count). Boundaries between threads
// fall on tiles counted from the first 64-byte boundary of `anchor` (the fp32 params), so no two
// threads write the same cache line of it. Returns when every range is done.
void ForEachAdamRange(size_t count, const void* anchor, const AdamThreading& threading,
                      const std::function<void(size_t begin, size_t end)>& fn);

}  // namespace sluice::kernels
