// The parameter shard of one rank on NVMe (the engine's zero_optimization.offload_param.device
// nvme, at stage 3). No full copy of the shard exists anywhere else: the offloaded optimizer writes
// each step's updated tiles back here (WriteBack, in shard order) and the parameter coordinator
// reads each unit's piece ahead of its all-gather (BeginRead / AwaitRead / EndRead).
//
// Layout: a swap store of its own ("sluice_params.rank<R>.swp" in offload_param.nvme_path), on the
// rank's I/O engine (rank_tiers.h), with one extent per gather group, in shard order (the engine
// names the groups: "params.<i>" for each unit's non-persistent run, what one all-gather sends,
// and one for the persistent run). A gather reads exactly its extent, so every read is one
// request of one group, checksummed as a whole.
//
// Bounds:
//   - pinned staging: buffer_count slots of min(buffer_size, largest group) elements; every read
//     and every write-back goes through a slot, so the pinned bytes never exceed
//     buffer_count x buffer_size elements, reserved from the rank's pinned staging budget. A
//     group larger than buffer_size is refused at creation (naming the group and
//     offload_param.buffer_size);
//   - host cache: up to max_in_cpu elements of groups are kept in host memory after their first
//     read (the first groups read are the first ones in trace order) and refreshed by every
//     write-back, so they are never re-read from NVMe.
//
//   auto store = NvmeParamStore::Create(device, tiers, options, groups);
//   store->WriteBack(offset, n, values) ... store->FinishWriteBack();  // shard order, all groups
//   NvmeParamRead read = store->BeginRead(group);  // issues the NVMe read (or hits the cache)
//   ... on the comm stream: const void* values = store->AwaitRead(read); use; EndRead(read);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "offload/host_shard_buffer.h"
#include "offload/rank_tiers.h"
#include "offload/swap_handle.h"
#include "offload/swap_store.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/memory_accounting.h"
#include "runtime/status.h"

namespace sluice::offload {

struct NvmeParamGroup {
  std::string what;    // "the parameters of <unit>", for errors
  std::string extent;  // the swap extent's name
  int64_t shard_offset = 0;
  int64_t elements = 0;  // this rank's elements of the group (its piece of the all-gather)
};

struct NvmeParamStoreOptions {
  std::string nvme_path;  // offload_param.nvme_path
  int rank = 0;
  DType dtype = DType::kF32;        // the parameter dtype of the shard
  int buffer_count = 5;             // offload_param.buffer_count
  int64_t buffer_size = 100000000;  // offload_param.buffer_size (elements)
  int64_t max_in_cpu = 1000000000;  // offload_param.max_in_cpu (elements)
};

struct NvmeParamStoreStats {
  int64_t nvme_reads = 0;    // group reads issued to NVMe
  int64_t cache_hits = 0;    // group reads served from the host cache
  int64_t group_writes = 0;  // group extents written
  int64_t read_bytes = 0;
  int64_t read_ns = 0;  // NVMe group reads from issue to completion, summed
  int64_t write_bytes = 0;
  int slots_in_use = 0;
  int peak_slots_in_use = 0;
};

// An issued group read: pass it to AwaitRead, then EndRead.
struct NvmeParamRead {
  int group = -1;
  int slot = -1;  // -1: served from the cache
  const void* data = nullptr;
  SwapHandle handle;
  int64_t issued_ns = 0;  // trace clock
};

class NvmeParamStore {
 public:
  // Creates the swap store (on `tiers`' I/O engine) and the staging (reserved from `tiers`'
  // pinned staging budget). InvalidArgument (naming offload_param.buffer_size or buffer_count)
  // when a group does not fit a slot. `tiers` must outlive the store.
  static Result<std::unique_ptr<NvmeParamStore>> Create(Device& device, RankTiers& tiers,
                                                        const NvmeParamStoreOptions& options,
                                                        std::vector<NvmeParamGroup> groups);
  // Waits for the I/O in flight.
  ~NvmeParamStore();
  NvmeParamStore(const NvmeParamStore&) = delete;
  NvmeParamStore& operator=(const NvmeParamStore&) = delete;

  // Write-back of the shard elements [shard_offset, shard_offset + n) (values in the parameter
  // dtype, any memory), called in increasing shard order, in tiles of any size: each group is
  // assembled in a staging slot and written to its extent (asynchronously) once complete.
  // Elements outside every group (none in a ShardLayout) are ignored.
  Status WriteBack(int64_t shard_offset, int64_t n, const void* values);
  // Waits for the writes; FailedPrecondition when a group was left incomplete.
  Status FinishWriteBack();

  // Copies shard elements [shard_offset, shard_offset + n) into `dst` (host memory), group by
  // group through the staging (or the cache), verifying each read: the serial path for
  // initialization, restores and consolidation. Outside WriteBack / FinishWriteBack.
  Status ReadRange(int64_t shard_offset, int64_t n, void* dst);

  // Issues the read of `group` into a free slot (waiting for one while all are busy), unless it
  // is cached. Outside WriteBack / FinishWriteBack.
  NvmeParamRead BeginRead(int group);
  // Waits for the read and verifies its checksum: DataLoss naming the group on a mismatch. The
  // values stay valid until EndRead. May run on another thread than BeginRead. When tracing, the
  // read is recorded on the "nvme" lane from its issue to its completion.
  Result<const void*> AwaitRead(NvmeParamRead& read);
  // Frees the read's slot (after AwaitRead, or to abandon it).
  void EndRead(NvmeParamRead& read);

  const std::vector<NvmeParamGroup>& groups() const { return groups_; }
  NvmeParamStoreStats stats() const;
  int64_t slot_elements() const { return slot_elements_; }
  uint64_t pinned_bytes() const { return staging_.size(); }
  uint64_t cache_bytes() const;
  uint64_t nvme_bytes() const;
  SwapStore& swap_store() { return *store_; }

 private:
  NvmeParamStore(const NvmeParamStoreOptions& options, std::vector<NvmeParamGroup> groups);
  std::byte* slot(int index) const;
  int AcquireSlot();  // blocks until one is free
  // A free slot, or the slot of the oldest write in flight once that write finished.
  Result<int> AcquireWriteSlot();
  void ReleaseSlot(int index);
  Status WaitPendingWrite(int slot_index);
  Status CompleteGroup(int group);
  void MaybeCache(int group, const void* values);

  NvmeParamStoreOptions options_;
  std::vector<NvmeParamGroup> groups_;
  size_t element_size_ = 4;
  int64_t slot_elements_ = 0;
  uint64_t slot_bytes_ = 0;
  // Declaration order: handles before the store (the engine is the rank's, in RankTiers).
  std::unique_ptr<SwapStore> store_;
  StagingReservation staging_reservation_;
  PinnedBuffer staging_;
  std::vector<HostShardBuffer> cache_;  // per group; empty when not cached
  MemoryCharge nvme_charge_;            // the extents, on the ledger's NVMe tier
  int64_t cached_elements_ = 0;

  mutable std::mutex mu_;
  std::condition_variable slot_freed_;
  std::vector<bool> slot_busy_;
  std::vector<SwapHandle> pending_writes_;  // per slot
  NvmeParamStoreStats stats_;

  // Write-back cursor: the group being assembled and the slot it is assembled in.
  int writing_group_ = -1;
  int writing_slot_ = -1;
  int64_t written_in_group_ = 0;
  std::deque<int> writes_in_flight_;  // slots of the groups being written, oldest first
};

}  // namespace sluice::offload
