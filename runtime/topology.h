// The machine's CPU and memory layout, from hwloc: cores, NUMA nodes and their memory. Offload
// uses it to place host buffers and bind CPU Adam threads; `sluice env` reports it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/foreign_call.h"
#include "runtime/status.h"

// hwloc calls return -1 (or NULL, checked by the caller) and set errno.
#define SLUICE_TRY_HWLOC(call)                                            \
  SLUICE_FOREIGN_CALL("hwloc", call, #call, sluice_rc_, sluice_rc_ < 0,         \
                      ::sluice::internal::ErrnoText(errno))

namespace sluice {

struct NumaNode {
  int os_index = 0;
  uint64_t memory_bytes = 0;
  std::string cpuset;  // list form, e.g. "0-15,32-47"
};

struct Topology {
  int packages = 0;
  int cores = 0;
  int hardware_threads = 0;
  std::vector<NumaNode> numa_nodes;
};

Result<Topology> DetectTopology();

}  // namespace sluice
