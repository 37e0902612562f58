#include "offload/host_state_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>

#include "runtime/topology.h"

namespace sluice::offload {

HostStateStore::~HostStateStore() {
  for (float*& tensor : tensors_) {
    if (tensor != nullptr) hwloc_free(topology_, tensor, tensor_bytes_);
    tensor = nullptr;
  }
  if (topology_ != nullptr) hwloc_topology_destroy(topology_);
}

Result<std::unique_ptr<HostStateStore>> HostStateStore::Create(
    const TileGrid& grid, int numa_node, const kernels::AdamThreading& threading, int moments) {
  if (moments != 1 && moments != 2) {
    return InvalidArgumentError("optimizer state with {} moment tensors (1 or 2)", moments);
  }
  std::unique_ptr<HostStateStore> store(new HostStateStore());
  SLUICE_TRY_HWLOC(hwloc_topology_init(&store->topology_));
  if (int rc = hwloc_topology_load(store->topology_); rc != 0) {
    hwloc_topology_destroy(store->topology_);
    store->topology_ = nullptr;
    return InternalError("hwloc_topology_load failed: {}", internal::ErrnoText(errno));
  }
  const int nodes = hwloc_get_nbobjs_by_type(store->topology_, HWLOC_OBJ_NUMANODE);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t bytes = static_cast<uint64_t>(grid.count) * sizeof(float);
  store->tensor_bytes_ = (std::max<uint64_t>(bytes, 1) + page - 1) / page * page;

  hwloc_obj_t node = nullptr;
  if (numa_node >= 0) {
    for (int i = 0; i < nodes; ++i) {
      hwloc_obj_t candidate = hwloc_get_obj_by_type(store->topology_, HWLOC_OBJ_NUMANODE, i);
      if (candidate != nullptr && static_cast<int>(candidate->os_index) == numa_node) {
        node = candidate;
      }
    }
    if (node == nullptr) {
      return InvalidArgumentError(
          "optimizer state NUMA node {} does not exist (this machine has {} NUMA node(s)); use "
          "-1 for first-touch placement",
          numa_node, nodes);
    }
  }
  const std::span<float*> tensors(store->tensors_, static_cast<size_t>(1 + moments));
  for (float*& tensor : tensors) {
    void* memory = node != nullptr
                       ? hwloc_alloc_membind(store->topology_, store->tensor_bytes_, node->nodeset,
                                             HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET)
                       : hwloc_alloc(store->topology_, store->tensor_bytes_);
    if (memory == nullptr) {
      return ResourceExhaustedError(
          "cannot allocate {} bytes of host memory for the optimizer state ({}); lower the "
          "shard size or use zero_optimization.offload_optimizer.device nvme",
          store->tensor_bytes_, internal::ErrnoText(errno));
    }
    tensor = static_cast<float*>(memory);
  }
  // First touch, tile by tile with the kernel's partition: each page is faulted in by the thread
  // (and so on the NUMA node) that updates it every step.
  for (int64_t tile = 0; tile < grid.num_tiles(); ++tile) {
    const int64_t begin = grid.begin(tile);
    kernels::ForEachAdamRange(static_cast<size_t>(grid.length(tile)), store->tensors_[0] + begin,
                              threading, [&tensors, begin](size_t b, size_t e) {
                                for (float* tensor : tensors) {
                                  std::memset(tensor + begin + b, 0, (e - b) * sizeof(float));
                                }
                              });
  }
  store->placement_ = node != nullptr ? fmt::format("bound to NUMA node {}", numa_node)
                                      : fmt::format("first touch over {} NUMA node(s)", nodes);
  store->charge_ = MemoryCharge(MemoryTier::kHost, MemoryCategory::kOptimizer,
                                static_cast<uint64_t>(tensors.size()) * store->tensor_bytes_);
  return store;
}

}  // namespace sluice::offload
