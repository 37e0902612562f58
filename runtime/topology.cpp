#include "runtime/topology.h"

#include <hwloc.h>

#include <cstdlib>
#include <memory>

namespace sluice {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};

std::string CpusetList(hwloc_const_cpuset_t set) {
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return "?";
  std::string out = text;
  std::free(text);
  return out;
}

}  // namespace

Result<Topology> DetectTopology() {
  hwloc_topology_t raw = nullptr;
  SLUICE_TRY_HWLOC(hwloc_topology_init(&raw));
  std::unique_ptr<hwloc_topology, TopologyDeleter> topo(raw);
  SLUICE_TRY_HWLOC(hwloc_topology_load(topo.get()));

  Topology out;
  out.packages = hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_PACKAGE);
  out.cores = hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_CORE);
  out.hardware_threads = hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_PU);
  int numa_count = hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numa_count; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo.get(), HWLOC_OBJ_NUMANODE, i);
    NumaNode n;
    n.os_index = static_cast<int>(node->os_index);
    n.memory_bytes = node->attr != nullptr ? node->attr->numanode.local_memory : 0;
    n.cpuset = CpusetList(node->cpuset);
    out.numa_nodes.push_back(std::move(n));
  }
  return out;
}

}  // namespace sluice
