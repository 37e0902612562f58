#include "kernels/cpu/thread_binding.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sluice::kernels {
namespace {

// Loaded once; hwloc topologies are safe for concurrent binding calls once loaded.
hwloc_topology_t Topology() {
  static hwloc_topology_t topology = [] {
    hwloc_topology_t t = nullptr;
    if (hwloc_topology_init(&t) != 0 || hwloc_topology_load(t) != 0) {
      std::fprintf(stderr, "sluice kernels: hwloc_topology_load failed: %s; threads run unbound\n",
                   std::strerror(errno));
      return static_cast<hwloc_topology_t>(nullptr);
    }
    return t;
  }();
  return topology;
}

void ReportBindFailureOnce(int pu, int err) {
  static std::atomic<bool> reported{false};
  if (!reported.exchange(true)) {
    std::fprintf(stderr,
                 "sluice kernels: hwloc_set_cpubind to PU %d failed: %s; threads run unbound\n", pu,
                 std::strerror(err));
  }
}

}  // namespace

std::string CpusetError(hwloc_const_cpuset_t cpuset) {
  if (cpuset == nullptr || hwloc_bitmap_iszero(cpuset)) return "the cpuset is empty";
  hwloc_topology_t topology = Topology();
  if (topology == nullptr) return "hwloc could not load the machine's topology";
  hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(topology);
  if (!hwloc_bitmap_isincluded(cpuset, allowed)) {
    char* wanted = nullptr;
    char* have = nullptr;
    hwloc_bitmap_list_asprintf(&wanted, cpuset);
    hwloc_bitmap_list_asprintf(&have, allowed);
    std::string error = std::string("cpuset ") + (wanted ? wanted : "?") +
                        " is not within the CPUs this process may use (" + (have ? have : "?") +
                        ")";
    std::free(wanted);
    std::free(have);
    return error;
  }
  return "";
}

ScopedThreadBinding::ScopedThreadBinding(hwloc_const_cpuset_t cpuset, int index) {
  if (cpuset == nullptr) return;
  hwloc_topology_t topology = Topology();
  int weight = hwloc_bitmap_weight(cpuset);
  if (topology == nullptr || weight <= 0) return;
  int pu = hwloc_bitmap_first(cpuset);
  for (int k = 0; k < index % weight; ++k) pu = hwloc_bitmap_next(cpuset, pu);

  hwloc_bitmap_t previous = hwloc_bitmap_alloc();
  hwloc_bitmap_t target = hwloc_bitmap_alloc();
  hwloc_bitmap_only(target, static_cast<unsigned>(pu));
  if (hwloc_get_cpubind(topology, previous, HWLOC_CPUBIND_THREAD) != 0 ||
      hwloc_set_cpubind(topology, target, HWLOC_CPUBIND_THREAD) != 0) {
    ReportBindFailureOnce(pu, errno);
    hwloc_bitmap_free(previous);
  } else {
    previous_ = previous;
  }
  hwloc_bitmap_free(target);
}

ScopedThreadBinding::~ScopedThreadBinding() {
  if (previous_ == nullptr) return;
  hwloc_set_cpubind(Topology(), previous_, HWLOC_CPUBIND_THREAD);
  hwloc_bitmap_free(previous_);
}

}  // namespace sluice::kernels
