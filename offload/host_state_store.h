// The host tier of the offloaded optimizer: fp32 master weights, exp_avg and (Adam) exp_avg_sq of
// the whole shard in ordinary pageable memory (charged to the ledger as host / optimizer), never
// pinned: only the staging ring is. Allocated through hwloc; on a NUMA machine each page is
// first touched (zeroed) by the Adam thread that will update it, tile by tile with the kernel's
// own static partition (kernels/cpu/adam_parallel.h), or bound to one node when asked.
#pragma once

#include <hwloc.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/adam_parallel.h"
#include "offload/tile_pipeline.h"
#include "runtime/memory_accounting.h"
#include "runtime/status.h"

namespace sluice::offload {

class HostStateStore {
 public:
  // Zeroed state for grid.count elements: the master weights and `moments` moment tensors (2:
  // Adam's exp_avg and exp_avg_sq; 1: Lion's exp_avg). `numa_node` -1: first touch; >= 0: bind to
  // that node (InvalidArgument when the machine has no such node).
  static Result<std::unique_ptr<HostStateStore>> Create(const TileGrid& grid, int numa_node,
                                                        const kernels::AdamThreading& threading,
                                                        int moments = 2);
  ~HostStateStore();
  HostStateStore(const HostStateStore&) = delete;
  HostStateStore& operator=(const HostStateStore&) = delete;

  float* master() const { return tensors_[0]; }
  float* exp_avg() const { return tensors_[1]; }
  float* exp_avg_sq() const { return tensors_[2]; }  // null with one moment
  uint64_t bytes() const { return charge_.bytes(); }
  // How the pages were placed: "first-touch over 1 NUMA node", "bound to NUMA node 1".
  const std::string& placement() const { return placement_; }

 private:
  HostStateStore() = default;

  hwloc_topology_t topology_ = nullptr;
  uint64_t tensor_bytes_ = 0;  // per tensor, page-rounded
  float* tensors_[3] = {nullptr, nullptr, nullptr};
  std::string placement_;
  MemoryCharge charge_;
};

}  // namespace sluice::offload
