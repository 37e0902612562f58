// Binding kernel threads to the CPUs a caller chose (an hwloc cpuset), e.g. the cores of the
// NUMA node that holds an offloaded shard. Kernels bind for the length of one call and restore
// the previous binding, so they leave OpenMP's and the caller's threads as they found them.
#pragma once

#include <hwloc.h>

#include <string>

namespace sluice::kernels {

// Empty when `cpuset` can bind threads, else why not: it is empty, or it holds CPUs this process
// may not run on.
std::string CpusetError(hwloc_const_cpuset_t cpuset);

// Binds the calling thread to the (index mod weight)-th CPU of `cpuset` and restores the thread's
// previous binding on destruction. A null cpuset binds nothing. A failed bind is reported once on
// stderr and the thread runs unbound: placement is a performance matter, never a correctness one.
class ScopedThreadBinding {
 public:
  ScopedThreadBinding(hwloc_const_cpuset_t cpuset, int index);
  ~ScopedThreadBinding();
  ScopedThreadBinding(const ScopedThreadBinding&) = delete;
  ScopedThreadBinding& operator=(const ScopedThreadBinding&) = delete;

  bool bound() const { return previous_ != nullptr; }

 private:
  hwloc_bitmap_t previous_ = nullptr;  // the binding to restore; null when nothing was bound
};

}  // namespace sluice::kernels
