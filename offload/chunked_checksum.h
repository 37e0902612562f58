// The checksum of a swap extent (format version 2, docs/swap_format.md): the extent's `length`
// bytes are cut into checksum chunks of 2^shift bytes, each chunk gets its own XXH3-64, and the
// extent checksum is the XXH3-64 of those chunk checksums (little-endian u64s, in order).
// Chunks are independent, so each is hashed as soon as the I/O of its bytes has finished, on the
// backend thread that finished it or on the thread waiting for the request, while the rest of
// the request is still in flight. Every byte is read once, by one hasher. Writes too are hashed
// behind their I/O, not ahead of it: a piece just transferred is still in cache, and hashing
// ahead would race the device for memory bandwidth (docs/swap_format.md has the figures).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "offload/aio_observer.h"

namespace sluice::offload {

inline constexpr uint32_t kMinChecksumChunkShift = 12;  // 4 KiB
inline constexpr uint32_t kMaxChecksumChunkShift = 30;  // 1 GiB

// The extent checksum from its chunk checksums.
uint64_t CombineChunkChecksums(std::span<const uint64_t> chunk_sums);
// The same value computed in one pass on the calling thread (the reference for tests and tools).
uint64_t ChunkedChecksum64(const void* data, uint64_t length, uint32_t chunk_shift);

class ChunkedChecksum final : public ChunkObserver {
 public:
  // Hashes [data, data + length) of a request that transfers `transfer` >= length bytes from
  // `data` (the padding after `length` is transferred but not covered), each chunk once the I/O
  // of all its bytes has finished.
  ChunkedChecksum(const std::byte* data, uint64_t length, uint64_t transfer, uint32_t chunk_shift);

  // From the engine: a piece finished (bookkeeping only).
  void ChunkFinished(const char* data, uint64_t bytes, bool ok) override;
  // From the engine's backend thread, after a piece of `bytes` transferred: hashes at most that
  // many bytes' worth of ready chunks, so that thread gets back to its ring promptly.
  void Work(uint64_t bytes) override;
  // For a request that failed before any I/O was issued: no piece will ever finish.
  void Abandon();

  // Called by the thread that waits for the request: hashes ready chunks alongside the backend
  // threads and returns once every piece has finished and every chunk is hashed (or, after a
  // failed piece, once nothing is being hashed any more).
  void HelpUntilFinished();

  // After HelpUntilFinished(): whether every piece transferred (then the checksums are valid).
  bool ok() const;
  uint64_t Digest() const { return CombineChunkChecksums(sums_); }
  const std::vector<uint64_t>& chunk_sums() const { return sums_; }
  uint32_t chunk_shift() const { return shift_; }
  uint64_t chunk_bytes() const { return uint64_t{1} << shift_; }

 private:
  void Hash(size_t chunk);
  // Claims and hashes up to `max_chunks` ready chunks; `lock` is held on entry and exit.
  void HashReady(std::unique_lock<std::mutex>& lock, size_t max_chunks);

  const std::byte* const data_;
  const uint64_t length_;
  const uint64_t transfer_;
  const uint32_t shift_;
  std::vector<uint64_t> sums_;  // written by the hasher that claimed the chunk

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> pending_;  // per chunk: bytes still to transfer
  std::vector<size_t> ready_;      // chunks ready to hash, not yet claimed (last = next)
  uint64_t finished_bytes_ = 0;
  int hashing_ = 0;  // chunks claimed and being hashed
  bool failed_ = false;
};

}  // namespace sluice::offload
