// Runs every Sluice function that allocates hwloc objects (runtime/topology.cpp,
// kernels/cpu/thread_binding.cpp), without MPI. tests/sanitizer/CMakeLists.txt runs it under
// LeakSanitizer with no suppression at all: it proves that the suppression of hwloc_bitmap_alloc
// in openmpi.lsan.supp (needed for Open MPI's singleton start-up) hides no leak of Sluice's.
#include <hwloc.h>

#include <cstdio>

#include "kernels/cpu/thread_binding.h"
#include "runtime/topology.h"

int main() {
  sluice::Result<sluice::Topology> topology = sluice::DetectTopology();
  if (!topology.ok()) {
    std::fprintf(stderr, "%s\n", topology.status().ToString().c_str());
    return 1;
  }
  hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
  hwloc_bitmap_set(cpus, 0);
  const std::string error = sluice::kernels::CpusetError(cpus);
  for (int i = 0; i < 3; ++i) {
    sluice::kernels::ScopedThreadBinding binding(cpus, i);
    if (error.empty() && !binding.bound()) std::fprintf(stderr, "thread %d not bound\n", i);
  }
  hwloc_bitmap_t empty = hwloc_bitmap_alloc();
  const std::string refused = sluice::kernels::CpusetError(empty);
  { sluice::kernels::ScopedThreadBinding none(nullptr, 0); }
  hwloc_bitmap_free(empty);
  hwloc_bitmap_free(cpus);
  std::printf("topology and thread binding ran; empty cpuset: %s\n", refused.c_str());
  return 0;
}
