// The on-disk header of a swap file (docs/swap_format.md): magic, version, identity of the store
// and of this stripe, and the extent table, checksummed as a whole. Two header slots at the start
// of every file take alternate generations, so rewriting one never destroys the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace sluice::offload {

inline constexpr char kSwapMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'W'};
// 2: per-chunk extent checksums (`checksum_chunk_shift`); 1 hashed each extent as one stream.
inline constexpr uint32_t kSwapFormatVersion = 2;
inline constexpr uint64_t kSwapFixedHeaderBytes = 256;
inline constexpr uint64_t kSwapExtentRecordBytes = 128;
inline constexpr size_t kSwapMaxNameBytes = 87;  // + NUL in an 88-byte field
// Data starts on a 1 MiB boundary after the two header slots.
inline constexpr uint64_t kSwapDataAlignment = 1ull << 20;

enum SwapExtentFlag : uint32_t {
  kSwapExtentWritten = 1u << 0,      // holds data from a completed write
  kSwapExtentChecksummed = 1u << 1,  // `checksum` covers its `length` bytes (chunked_checksum.h)
};

struct SwapExtentRecord {
  std::string name;
  uint64_t offset = 0;    // in the logical (striped) data space
  uint64_t capacity = 0;  // bytes reserved, a multiple of 4096
  uint64_t length = 0;    // bytes last written
  uint64_t checksum = 0;
  uint32_t flags = 0;
  uint32_t checksum_chunk_shift = 0;  // checksum chunks are 2^shift bytes (0: not checksummed)
};

struct SwapHeader {
  uint64_t generation = 0;
  uint64_t store_id = 0;  // random, the same in every stripe file of one store
  uint32_t rank = 0;
  uint32_t stripe_count = 1;
  uint32_t stripe_index = 0;
  uint32_t max_extents = 0;
  uint64_t stripe_size = 0;
  uint64_t slot_bytes = 0;
  uint64_t data_offset = 0;  // where the data region starts in every file
  uint64_t capacity = 0;     // logical data bytes (all stripes together)
  std::vector<SwapExtentRecord> extents;
};

// Size of one header slot for a table of `max_extents` records (a multiple of 4096).
uint64_t SwapSlotBytes(uint32_t max_extents);
// First data byte in a file whose slots are `slot_bytes` each.
uint64_t SwapDataOffset(uint64_t slot_bytes);
// Capacity is kept a whole number of stripe rows (stripe_size x stripe_count), so every file of
// a store has the same size: data_offset + capacity / stripe_count.
inline uint64_t SwapRowBytes(const SwapHeader& h) { return h.stripe_size * h.stripe_count; }
inline uint64_t SwapFileBytes(const SwapHeader& h) {
  return h.data_offset + h.capacity / h.stripe_count;
}

// Serialized header (fixed part and the used records), padded to a multiple of 4096.
std::vector<std::byte> EncodeSwapHeader(const SwapHeader& header);

// Parses and checks one slot. `where` ("/x/sluice_swap.rank0.swp, slot B") prefixes errors,
// which name the field at fault: magic, version, record sizes, extent_count, checksum.
Result<SwapHeader> DecodeSwapHeader(std::span<const std::byte> slot, const std::string& where);

// Reads the fixed part only (for slot_bytes, to locate slot B) without the table checksum.
Result<SwapHeader> PeekSwapHeader(std::span<const std::byte> fixed, const std::string& where);

}  // namespace sluice::offload
