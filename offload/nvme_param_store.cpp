#include "offload/nvme_param_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "offload/aligned_buffer.h"
#include "runtime/check.h"
#include "runtime/trace.h"

namespace sluice::offload {

NvmeParamStore::NvmeParamStore(const NvmeParamStoreOptions& options,
                               std::vector<NvmeParamGroup> groups)
    : options_(options), groups_(std::move(groups)), element_size_(DTypeSize(options.dtype)) {}

Result<std::unique_ptr<NvmeParamStore>> NvmeParamStore::Create(Device& device, RankTiers& tiers,
                                                               const NvmeParamStoreOptions& options,
                                                               std::vector<NvmeParamGroup> groups) {
  if (options.buffer_count < 1) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.buffer_count = {} must be at least 1 (pinned staging "
        "slots of the NVMe parameter reads)",
        options.buffer_count);
  }
  if (options.buffer_size < 1) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.buffer_size = {} must be a positive element count",
        options.buffer_size);
  }
  if (options.max_in_cpu < 0) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.max_in_cpu = {} must be an element count of 0 or more",
        options.max_in_cpu);
  }
  std::unique_ptr<NvmeParamStore> s(new NvmeParamStore(options, std::move(groups)));
  int64_t largest = 0;
  uint64_t capacity = 0;
  for (const NvmeParamGroup& g : s->groups_) {
    if (g.elements > options.buffer_size) {
      return InvalidArgumentError(
          "zero_optimization.offload_param.buffer_size = {} elements is smaller than {} ({} "
          "elements on this rank, read from NVMe in one piece): raise buffer_size to at least {}",
          options.buffer_size, g.what, g.elements, g.elements);
    }
    largest = std::max(largest, g.elements);
    capacity += AlignUp(static_cast<uint64_t>(g.elements) * s->element_size_, kIoAlignment);
  }
  s->slot_elements_ = largest;
  s->slot_bytes_ = AlignUp(static_cast<uint64_t>(largest) * s->element_size_, kIoAlignment);
  s->cache_.resize(s->groups_.size());

  SwapStoreOptions store;
  store.paths = {options.nvme_path};
  store.rank = options.rank;
  store.capacity_bytes = capacity;
  store.file_name = fmt::format("sluice_params.rank{}.swp", options.rank);
  store.remove_on_close = true;  // scratch: the state that matters goes into checkpoints
  Result<std::unique_ptr<SwapStore>> created = tiers.OpenSwapStore(
      store,
      fmt::format("the parameter swap store in zero_optimization.offload_param.nvme_path = {}",
                  options.nvme_path));
  if (!created.ok()) return created.status();
  s->store_ = std::move(created).value();
  uint64_t reserved = 0;
  for (const NvmeParamGroup& g : s->groups_) {
    Result<SwapExtent> extent =
        s->store_->Allocate(g.extent, static_cast<uint64_t>(g.elements) * s->element_size_);
    if (!extent.ok()) {
      return Status(extent.status())
          .WithContext(fmt::format("reserving NVMe space for {}", g.what));
    }
    reserved += extent->capacity;
  }
  s->nvme_charge_ = MemoryCharge(MemoryTier::kNvme, MemoryCategory::kParams, reserved);
  if (s->slot_bytes_ > 0) {
    SLUICE_ASSIGN_OR_RETURN(
        s->staging_reservation_,
        StagingReservation::Make(&tiers.staging_budget(),
                                 s->slot_bytes_ * static_cast<uint64_t>(options.buffer_count),
                                 "the NVMe parameters' staging (zero_optimization.offload_param."
                                 "buffer_count x the largest group)"));
    Result<PinnedBuffer> staging = device.AllocatePinnedHost(
        s->slot_bytes_ * static_cast<uint64_t>(options.buffer_count), MemoryCategory::kBuffers);
    if (!staging.ok()) {
      return Status(staging.status())
          .WithContext(fmt::format(
              "allocating the pinned staging of the NVMe parameters ({} slots of {} elements: "
              "zero_optimization.offload_param.buffer_count x the largest group)",
              options.buffer_count, largest));
    }
    s->staging_ = std::move(staging).value();
  }
  s->slot_busy_.assign(static_cast<size_t>(options.buffer_count), false);
  s->pending_writes_.resize(static_cast<size_t>(options.buffer_count));
  return s;
}

NvmeParamStore::~NvmeParamStore() {
  for (SwapHandle& write : pending_writes_) (void)write.Wait();
}

std::byte* NvmeParamStore::slot(int index) const {
  return staging_.data_as<std::byte>() + slot_bytes_ * static_cast<uint64_t>(index);
}

int NvmeParamStore::AcquireSlot() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    for (size_t i = 0; i < slot_busy_.size(); ++i) {
      if (!slot_busy_[i]) {
        slot_busy_[i] = true;
        ++stats_.slots_in_use;
        stats_.peak_slots_in_use = std::max(stats_.peak_slots_in_use, stats_.slots_in_use);
        return static_cast<int>(i);
      }
    }
    slot_freed_.wait(lock);
  }
}

void NvmeParamStore::ReleaseSlot(int index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_CHECK(slot_busy_[static_cast<size_t>(index)]) << "staging slot released twice";
    slot_busy_[static_cast<size_t>(index)] = false;
    --stats_.slots_in_use;
  }
  slot_freed_.notify_all();
}

Result<int> NvmeParamStore::AcquireWriteSlot() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slot_busy_.size(); ++i) {
      if (slot_busy_[i]) continue;
      slot_busy_[i] = true;
      ++stats_.slots_in_use;
      stats_.peak_slots_in_use = std::max(stats_.peak_slots_in_use, stats_.slots_in_use);
      return static_cast<int>(i);
    }
  }
  // Every slot holds a write in flight: the oldest one's slot is reused once it is on NVMe.
  SLUICE_CHECK(!writes_in_flight_.empty()) << "no staging slot for the write-back";
  const int index = writes_in_flight_.front();
  writes_in_flight_.pop_front();
  if (Status waited = WaitPendingWrite(index); !waited.ok()) {
    ReleaseSlot(index);
    return std::move(waited).WithContext("writing the parameter shard to NVMe");
  }
  return index;
}

Status NvmeParamStore::WaitPendingWrite(int slot_index) {
  SwapHandle& write = pending_writes_[static_cast<size_t>(slot_index)];
  Status status = write.Wait();
  write = SwapHandle();
  return status;
}

void NvmeParamStore::MaybeCache(int group, const void* values) {
  const NvmeParamGroup& g = groups_[static_cast<size_t>(group)];
  HostShardBuffer& cached = cache_[static_cast<size_t>(group)];
  if (cached.empty()) {
    if (cached_elements_ + g.elements > options_.max_in_cpu) return;
    Result<HostShardBuffer> buffer =
        HostShardBuffer::Allocate(static_cast<size_t>(g.elements) * element_size_,
                                  MemoryCategory::kParams, "a cached NVMe parameter group");
    if (!buffer.ok()) return;  // the cache is an optimization: reading from NVMe still works
    cached = std::move(buffer).value();
    cached_elements_ += g.elements;
  }
  std::memcpy(cached.data(), values, cached.size());
}

Status NvmeParamStore::CompleteGroup(int group) {
  const NvmeParamGroup& g = groups_[static_cast<size_t>(group)];
  const uint64_t bytes = static_cast<uint64_t>(g.elements) * element_size_;
  const std::byte* values = slot(writing_slot_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Write-through: a cached group never goes stale.
    if (!cache_[static_cast<size_t>(group)].empty()) {
      std::memcpy(cache_[static_cast<size_t>(group)].data(), values, bytes);
    }
    ++stats_.group_writes;
    stats_.write_bytes += static_cast<int64_t>(bytes);
  }
  pending_writes_[static_cast<size_t>(writing_slot_)] = store_->WriteAsync(g.extent, values, bytes);
  // The slot stays busy until its write is waited for (a later group's turn, or Finish).
  writes_in_flight_.push_back(writing_slot_);
  writing_group_ = -1;
  writing_slot_ = -1;
  written_in_group_ = 0;
  return OkStatus();
}

Status NvmeParamStore::WriteBack(int64_t shard_offset, int64_t n, const void* values) {
  const auto* source = static_cast<const std::byte*>(values);
  int64_t at = shard_offset;
  const int64_t end = shard_offset + n;
  while (at < end) {
    // The group holding `at`, or the next one after it (groups are in shard order).
    auto it = std::upper_bound(
        groups_.begin(), groups_.end(), at,
        [](int64_t offset, const NvmeParamGroup& g) { return offset < g.shard_offset; });
    int group = static_cast<int>(it - groups_.begin()) - 1;
    if (group < 0 || at >= groups_[static_cast<size_t>(group)].shard_offset +
                               groups_[static_cast<size_t>(group)].elements) {
      if (it == groups_.end()) break;
      at = std::min(end, it->shard_offset);  // a gap between groups: nothing to store
      continue;
    }
    const NvmeParamGroup& g = groups_[static_cast<size_t>(group)];
    if (writing_group_ != group) {
      if (writing_group_ >= 0 || at != g.shard_offset) {
        return FailedPreconditionError(
            "NVMe parameter write-back out of order at shard element {}: {} must be written "
            "from its first element, after {} was completed",
            at, g.what,
            writing_group_ >= 0 ? groups_[static_cast<size_t>(writing_group_)].what
                                : std::string("the previous group"));
      }
      SLUICE_ASSIGN_OR_RETURN(const int index, AcquireWriteSlot());
      writing_group_ = group;
      writing_slot_ = index;
      written_in_group_ = 0;
    }
    const int64_t count = std::min(end, g.shard_offset + g.elements) - at;
    std::memcpy(slot(writing_slot_) + static_cast<size_t>(written_in_group_) * element_size_,
                source + static_cast<size_t>(at - shard_offset) * element_size_,
                static_cast<size_t>(count) * element_size_);
    written_in_group_ += count;
    at += count;
    if (written_in_group_ == g.elements) SLUICE_RETURN_IF_ERROR(CompleteGroup(group));
  }
  return OkStatus();
}

Status NvmeParamStore::FinishWriteBack() {
  Status status;
  if (writing_group_ >= 0) {
    status = FailedPreconditionError(
        "NVMe parameter write-back ended with {} incomplete ({} of {} elements written)",
        groups_[static_cast<size_t>(writing_group_)].what, written_in_group_,
        groups_[static_cast<size_t>(writing_group_)].elements);
    ReleaseSlot(writing_slot_);
    writing_group_ = -1;
    writing_slot_ = -1;
  }
  while (!writes_in_flight_.empty()) {
    const int index = writes_in_flight_.front();
    writes_in_flight_.pop_front();
    Status waited = WaitPendingWrite(index);
    if (status.ok()) status = std::move(waited);
    ReleaseSlot(index);
  }
  // No Flush: the store is scratch (removed on close, never reopened), its extent checksums
  // live in memory, and an fdatasync per step would cost more than the writes.
  if (!status.ok()) return std::move(status).WithContext("writing the parameter shard to NVMe");
  return OkStatus();
}

Status NvmeParamStore::ReadRange(int64_t shard_offset, int64_t n, void* dst) {
  auto* out = static_cast<std::byte*>(dst);
  const int64_t end = shard_offset + n;
  for (size_t group = 0; group < groups_.size(); ++group) {
    const NvmeParamGroup& g = groups_[group];
    const int64_t begin = std::max(shard_offset, g.shard_offset);
    const int64_t stop = std::min(end, g.shard_offset + g.elements);
    if (begin >= stop) continue;
    NvmeParamRead read = BeginRead(static_cast<int>(group));
    Result<const void*> values = AwaitRead(read);
    if (values.ok()) {
      std::memcpy(out + static_cast<size_t>(begin - shard_offset) * element_size_,
                  static_cast<const std::byte*>(*values) +
                      static_cast<size_t>(begin - g.shard_offset) * element_size_,
                  static_cast<size_t>(stop - begin) * element_size_);
    }
    EndRead(read);
    SLUICE_RETURN_IF_ERROR(values.status());
  }
  return OkStatus();
}

NvmeParamRead NvmeParamStore::BeginRead(int group) {
  SLUICE_CHECK(group >= 0 && static_cast<size_t>(group) < groups_.size());
  SLUICE_CHECK_LT(writing_group_, 0) << "read during a parameter write-back";
  NvmeParamRead read;
  read.group = group;
  const NvmeParamGroup& g = groups_[static_cast<size_t>(group)];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cache_[static_cast<size_t>(group)].empty()) {
      read.data = cache_[static_cast<size_t>(group)].data();
      ++stats_.cache_hits;
      return read;
    }
  }
  read.slot = AcquireSlot();
  // A write-back's write may still target this slot.
  if (Status waited = WaitPendingWrite(read.slot); !waited.ok()) {
    read.handle = SwapHandle::Failed(std::move(waited));
    return read;
  }
  const uint64_t bytes = static_cast<uint64_t>(g.elements) * element_size_;
  read.data = slot(read.slot);
  read.issued_ns = TraceClockNs();
  read.handle = store_->ReadAsync(g.extent, slot(read.slot), bytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.nvme_reads;
  stats_.read_bytes += static_cast<int64_t>(bytes);
  return read;
}

Result<const void*> NvmeParamStore::AwaitRead(NvmeParamRead& read) {
  if (read.slot < 0) return read.data;
  Status status = read.handle.Wait();
  const NvmeParamGroup& g = groups_[static_cast<size_t>(read.group)];
  if (!status.ok()) {
    return std::move(status).WithContext(fmt::format("reading {} from NVMe", g.what));
  }
  const int64_t done_ns = TraceClockNs();
  TraceRecorder& trace = TraceRecorder::Global();
  if (trace.enabled()) {
    trace.Record(kTraceLaneNvme, fmt::format("read {}", g.what), read.issued_ns, done_ns,
                 static_cast<uint64_t>(g.elements) * element_size_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.read_ns += done_ns - read.issued_ns;
  MaybeCache(read.group, read.data);
  return read.data;
}

void NvmeParamStore::EndRead(NvmeParamRead& read) {
  if (read.slot < 0) return;
  (void)read.handle.Wait();  // an abandoned read must not write into a reused slot
  ReleaseSlot(read.slot);
  read.slot = -1;
}

NvmeParamStoreStats NvmeParamStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

uint64_t NvmeParamStore::cache_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t bytes = 0;
  for (const HostShardBuffer& b : cache_) bytes += b.size();
  return bytes;
}

uint64_t NvmeParamStore::nvme_bytes() const {
  uint64_t bytes = 0;
  for (const SwapExtent& e : store_->Extents()) bytes += e.capacity;
  return bytes;
}

}  // namespace sluice::offload
