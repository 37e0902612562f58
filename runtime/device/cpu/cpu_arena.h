// The CPU device's memory: one region of exactly `capacity` bytes reserved with mmap, carved by a
// best-fit allocator with free-block coalescing, so capacity limits and fragmentation behave as
// on a GPU. Small blocks (activations, scratch) are carved from the top of the region and large
// ones (parameters, gradients, staging) best-fit from the bottom, as a caching allocator keeps
// small and large pools apart: a small block does not split the hole a freed large one leaves
// while there is room above it. Supports stream-ordered frees (cudaFreeAsync): a block freed on a
// stream stays reserved until the stream reaches the free, but may be handed at once to an
// allocation on that same stream, whose work runs after the free anyway. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "runtime/status.h"

namespace sluice {

class CpuArena {
 public:
  struct Stats {
    uint64_t capacity = 0;
    uint64_t used = 0;       // allocated + pending
    uint64_t pending = 0;    // freed on a stream that has not reached the free yet
    uint64_t abandoned = 0;  // freed on a stream that failed first (AbandonFree), in `used`
    uint64_t largest_free_block = 0;
    size_t allocated_blocks = 0;
    size_t free_blocks = 0;
  };

  // Reserves the region (MAP_NORESERVE: pages are committed when first touched). `capacity` must
  // be a positive multiple of `alignment`, and `alignment` a power of two no larger than a page.
  static Result<std::unique_ptr<CpuArena>> Create(uint64_t capacity, size_t alignment);
  ~CpuArena();
  CpuArena(const CpuArena&) = delete;
  CpuArena& operator=(const CpuArena&) = delete;

  // Reserves AlignUp(bytes) bytes (bytes > 0); nullptr when no block fits. With a non-zero
  // stream id, a block whose free is pending on that stream may be reused.
  void* Allocate(uint64_t bytes, uint64_t stream_id = 0);
  // Allocate, and while no block fits but frees are pending on streams, waits for the streams to
  // reach them and tries again (what a CUDA caching allocator does when memory runs out).
  // nullptr once nothing is pending and still no block fits. Never from a stream's own worker:
  // the free it would wait for may be queued behind it.
  void* AllocateAfterPendingFrees(uint64_t bytes, uint64_t stream_id = 0);
  // Frees a block returned by Allocate now.
  void Free(void* data);
  // Marks the block freed on stream `stream_id`; the stream calls CompleteFree(ticket) when it
  // reaches the free.
  uint64_t FreeLater(void* data, uint64_t stream_id);
  void CompleteFree(uint64_t ticket);
  // The stream failed before it reached the free: the memory stays reserved (allocated) for the
  // life of the arena, since failed work may still own it.
  void AbandonFree(uint64_t ticket);

  bool Contains(const void* data, uint64_t bytes) const;
  Stats stats() const;
  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }

 private:
  enum class BlockState : uint8_t { kFree, kAllocated, kPending };
  struct Block {
    uint64_t size = 0;
    BlockState state = BlockState::kFree;
    uint64_t stream_id = 0;  // kPending: the stream that frees it
    uint64_t ticket = 0;     // kPending: the FreeLater call it belongs to
  };
  using SizeIndex = std::set<std::pair<uint64_t, uint64_t>>;  // (size, offset), best fit first

  CpuArena(char* base, uint64_t capacity, size_t alignment);
  void* AllocateLocked(uint64_t bytes, uint64_t stream_id);  // mu_ held; bytes aligned
  uint64_t OffsetOf(const void* data) const;
  // Takes `block` out of the indexes and shrinks it to `bytes`; what is left over becomes a block
  // of the same state right after it.
  void TakeFront(std::map<uint64_t, Block>::iterator block, uint64_t bytes);
  // The same for the last `bytes` of a free block; returns the iterator of the taken block.
  std::map<uint64_t, Block>::iterator TakeBack(std::map<uint64_t, Block>::iterator block,
                                               uint64_t bytes);
  void MakeFree(uint64_t offset);
  void AddToIndex(uint64_t offset, const Block& block);
  void RemoveFromIndex(uint64_t offset, const Block& block);

  char* const base_;
  const uint64_t capacity_;
  const size_t alignment_;
  // Blocks up to this size are small: 1 MiB (where PyTorch's caching allocator draws the line),
  // or 1/64 of a smaller region.
  const uint64_t small_block_;

  mutable std::mutex mu_;
  std::condition_variable freed_cv_;  // CompleteFree made pending bytes free
  std::map<uint64_t, Block> blocks_;  // offset -> block; the blocks tile [0, capacity)
  SizeIndex free_by_size_;
  std::set<uint64_t> free_by_offset_;
  std::unordered_map<uint64_t, SizeIndex> pending_by_stream_;
  std::unordered_map<uint64_t, std::set<uint64_t>> pending_by_ticket_;  // ticket -> offsets
  uint64_t next_ticket_ = 1;
  uint64_t free_bytes_ = 0;
  uint64_t pending_bytes_ = 0;
  uint64_t abandoned_bytes_ = 0;
  size_t allocated_blocks_ = 0;
};

}  // namespace sluice
