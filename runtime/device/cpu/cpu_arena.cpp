#include "runtime/device/cpu/cpu_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "runtime/foreign_call.h"
#include "runtime/size_format.h"

namespace sluice {

Result<std::unique_ptr<CpuArena>> CpuArena::Create(uint64_t capacity, size_t alignment) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  SLUICE_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0 && alignment <= page)
      << "bad arena alignment " << alignment;
  if (capacity == 0 || capacity % alignment != 0) {
    return InvalidArgumentError("device memory capacity {} bytes is not a positive multiple of {}",
                                capacity, alignment);
  }
  void* base = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return ResourceExhaustedError(
        "cannot reserve {} of address space for the cpu device's memory: mmap failed: {}; lower "
        "device.memory_limit",
        FormatBytes(capacity), internal::ErrnoText(errno));
  }
  return std::unique_ptr<CpuArena>(new CpuArena(static_cast<char*>(base), capacity, alignment));
}

CpuArena::CpuArena(char* base, uint64_t capacity, size_t alignment)
    : base_(base),
      capacity_(capacity),
      alignment_(alignment),
      small_block_(std::min<uint64_t>(uint64_t{1} << 20, capacity / 64)),
      free_bytes_(capacity) {
  blocks_.emplace(0, Block{capacity, BlockState::kFree, 0, 0});
  free_by_size_.emplace(capacity, 0);
  free_by_offset_.insert(0);
}

CpuArena::~CpuArena() { munmap(base_, capacity_); }

uint64_t CpuArena::OffsetOf(const void* data) const {
  const char* p = static_cast<const char*>(data);
  SLUICE_CHECK(p >= base_ && p < base_ + capacity_) << "pointer " << data << " is not in the arena";
  return static_cast<uint64_t>(p - base_);
}

bool CpuArena::Contains(const void* data, uint64_t bytes) const {
  const char* p = static_cast<const char*>(data);
  return p >= base_ && bytes <= capacity_ && p <= base_ + (capacity_ - bytes);
}

void CpuArena::AddToIndex(uint64_t offset, const Block& block) {
  if (block.state == BlockState::kFree) {
    free_by_size_.emplace(block.size, offset);
    free_by_offset_.insert(offset);
  } else if (block.state == BlockState::kPending) {
    pending_by_stream_[block.stream_id].emplace(block.size, offset);
    pending_by_ticket_[block.ticket].insert(offset);
  }
}

void CpuArena::RemoveFromIndex(uint64_t offset, const Block& block) {
  if (block.state == BlockState::kFree) {
    free_by_size_.erase({block.size, offset});
    free_by_offset_.erase(offset);
  } else if (block.state == BlockState::kPending) {
    auto by_stream = pending_by_stream_.find(block.stream_id);
    by_stream->second.erase({block.size, offset});
    if (by_stream->second.empty()) pending_by_stream_.erase(by_stream);
    auto by_ticket = pending_by_ticket_.find(block.ticket);
    by_ticket->second.erase(offset);
    if (by_ticket->second.empty()) pending_by_ticket_.erase(by_ticket);
  }
}

void CpuArena::TakeFront(std::map<uint64_t, Block>::iterator block, uint64_t bytes) {
  const uint64_t offset = block->first;
  Block& front = block->second;
  RemoveFromIndex(offset, front);
  if (front.size > bytes) {
    Block rest = front;
    rest.size = front.size - bytes;
    blocks_.emplace_hint(std::next(block), offset + bytes, rest);
    AddToIndex(offset + bytes, rest);
    front.size = bytes;
  }
}

std::map<uint64_t, CpuArena::Block>::iterator CpuArena::TakeBack(
    std::map<uint64_t, Block>::iterator block, uint64_t bytes) {
  const uint64_t offset = block->first;
  Block& front = block->second;
  RemoveFromIndex(offset, front);
  if (front.size == bytes) return block;
  Block back = front;
  back.size = bytes;
  front.size -= bytes;
  AddToIndex(offset, front);
  return blocks_.emplace_hint(std::next(block), offset + front.size, back);
}

void* CpuArena::Allocate(uint64_t bytes, uint64_t stream_id) {
  SLUICE_CHECK(bytes > 0);
  if (bytes > capacity_) return nullptr;
  bytes = (bytes + alignment_ - 1) & ~(static_cast<uint64_t>(alignment_) - 1);
  std::lock_guard<std::mutex> lock(mu_);
  return AllocateLocked(bytes, stream_id);
}

void* CpuArena::AllocateAfterPendingFrees(uint64_t bytes, uint64_t stream_id) {
  SLUICE_CHECK(bytes > 0);
  if (bytes > capacity_) return nullptr;
  bytes = (bytes + alignment_ - 1) & ~(static_cast<uint64_t>(alignment_) - 1);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (void* data = AllocateLocked(bytes, stream_id)) return data;
    if (pending_bytes_ == 0) return nullptr;
    freed_cv_.wait(lock);
  }
}

void* CpuArena::AllocateLocked(uint64_t bytes, uint64_t stream_id) {
  if (bytes <= small_block_) {
    // The highest free block that fits: small blocks pack against the top of the region.
    for (auto it = free_by_offset_.rbegin(); it != free_by_offset_.rend(); ++it) {
      auto block = blocks_.find(*it);
      if (block->second.size < bytes) continue;
      block = TakeBack(block, bytes);
      block->second.state = BlockState::kAllocated;
      free_bytes_ -= bytes;
      ++allocated_blocks_;
      return base_ + block->first;
    }
  }
  auto fit = free_by_size_.lower_bound({bytes, 0});
  if (fit != free_by_size_.end()) {
    auto block = blocks_.find(fit->second);
    TakeFront(block, bytes);
    block->second.state = BlockState::kAllocated;
    free_bytes_ -= bytes;
    ++allocated_blocks_;
    return base_ + block->first;
  }
  if (stream_id == 0) return nullptr;
  auto pending = pending_by_stream_.find(stream_id);
  if (pending == pending_by_stream_.end()) return nullptr;
  auto reuse = pending->second.lower_bound({bytes, 0});
  if (reuse == pending->second.end()) return nullptr;
  auto block = blocks_.find(reuse->second);
  TakeFront(block, bytes);  // may erase `pending`; not used after this
  block->second.state = BlockState::kAllocated;
  block->second.stream_id = block->second.ticket = 0;
  pending_bytes_ -= bytes;
  ++allocated_blocks_;
  return base_ + block->first;
}

void CpuArena::MakeFree(uint64_t offset) {
  auto block = blocks_.find(offset);
  SLUICE_CHECK(block != blocks_.end());
  RemoveFromIndex(offset, block->second);
  block->second.state = BlockState::kFree;
  block->second.stream_id = block->second.ticket = 0;
  free_bytes_ += block->second.size;
  // Coalesce with free neighbours so that fragmentation heals when neighbours are freed.
  auto next = std::next(block);
  if (next != blocks_.end() && next->second.state == BlockState::kFree) {
    RemoveFromIndex(next->first, next->second);
    block->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (block != blocks_.begin()) {
    auto prev = std::prev(block);
    if (prev->second.state == BlockState::kFree) {
      RemoveFromIndex(prev->first, prev->second);
      prev->second.size += block->second.size;
      blocks_.erase(block);
      block = prev;
    }
  }
  AddToIndex(block->first, block->second);
}

void CpuArena::Free(void* data) {
  const uint64_t offset = OffsetOf(data);
  std::lock_guard<std::mutex> lock(mu_);
  auto block = blocks_.find(offset);
  SLUICE_CHECK(block != blocks_.end() && block->second.state == BlockState::kAllocated)
      << "freeing " << data << ", which is not an allocated block";
  --allocated_blocks_;
  MakeFree(offset);
}

uint64_t CpuArena::FreeLater(void* data, uint64_t stream_id) {
  SLUICE_CHECK(stream_id != 0);
  const uint64_t offset = OffsetOf(data);
  std::lock_guard<std::mutex> lock(mu_);
  auto block = blocks_.find(offset);
  SLUICE_CHECK(block != blocks_.end() && block->second.state == BlockState::kAllocated)
      << "freeing " << data << ", which is not an allocated block";
  --allocated_blocks_;
  const uint64_t ticket = next_ticket_++;
  block->second.state = BlockState::kPending;
  block->second.stream_id = stream_id;
  block->second.ticket = ticket;
  pending_bytes_ += block->second.size;
  AddToIndex(offset, block->second);
  return ticket;
}

void CpuArena::CompleteFree(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto by_ticket = pending_by_ticket_.find(ticket);
  if (by_ticket == pending_by_ticket_.end()) return;  // all of it was reused on its stream
  const std::set<uint64_t> offsets = by_ticket->second;
  for (uint64_t offset : offsets) {
    pending_bytes_ -= blocks_.at(offset).size;
    MakeFree(offset);
  }
  freed_cv_.notify_all();
}

void CpuArena::AbandonFree(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto by_ticket = pending_by_ticket_.find(ticket);
  if (by_ticket == pending_by_ticket_.end()) return;  // all of it was reused on its stream
  const std::set<uint64_t> offsets = by_ticket->second;
  for (uint64_t offset : offsets) {
    auto block = blocks_.find(offset);
    RemoveFromIndex(offset, block->second);
    pending_bytes_ -= block->second.size;
    block->second.state = BlockState::kAllocated;
    block->second.stream_id = block->second.ticket = 0;
    abandoned_bytes_ += block->second.size;
  }
  pending_by_ticket_.erase(ticket);
  freed_cv_.notify_all();  // pending bytes went down: a waiting allocation may give up
}

CpuArena::Stats CpuArena::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats stats;
  stats.capacity = capacity_;
  stats.used = capacity_ - free_bytes_;
  stats.pending = pending_bytes_;
  stats.abandoned = abandoned_bytes_;
  stats.largest_free_block = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  stats.allocated_blocks = allocated_blocks_;
  stats.free_blocks = free_by_size_.size();
  return stats;
}

}  // namespace sluice
