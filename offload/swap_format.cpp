#include "offload/swap_format.h"

#include <bit>
#include <cstring>

#include "offload/aligned_buffer.h"
#include "offload/checksum.h"

namespace sluice::offload {
namespace {

// Fixed-part field offsets (little-endian; see docs/swap_format.md).
constexpr size_t kVersionAt = 8;
constexpr size_t kFixedBytesAt = 12;
constexpr size_t kRecordBytesAt = 16;
constexpr size_t kRankAt = 20;
constexpr size_t kGenerationAt = 24;
constexpr size_t kStoreIdAt = 32;
constexpr size_t kStripeCountAt = 40;
constexpr size_t kStripeIndexAt = 44;
constexpr size_t kStripeSizeAt = 48;
constexpr size_t kSlotBytesAt = 56;
constexpr size_t kDataOffsetAt = 64;
constexpr size_t kCapacityAt = 72;
constexpr size_t kMaxExtentsAt = 80;
constexpr size_t kExtentCountAt = 84;
constexpr size_t kChecksumAt = 248;
// Record field offsets.
constexpr size_t kNameField = 88;
constexpr size_t kOffsetAt = 88;
constexpr size_t kCapacityRecAt = 96;
constexpr size_t kLengthAt = 104;
constexpr size_t kChecksumRecAt = 112;
constexpr size_t kFlagsAt = 120;
constexpr size_t kChunkShiftAt = 124;

static_assert(std::endian::native == std::endian::little,
              "swap headers are little-endian; add byte swapping for this platform");

template <typename T>
void Put(std::byte* base, size_t at, T value) {
  std::memcpy(base + at, &value, sizeof(T));
}
template <typename T>
T Get(const std::byte* base, size_t at) {
  T value;
  std::memcpy(&value, base + at, sizeof(T));
  return value;
}

uint64_t HeaderChecksum(const std::byte* base, uint32_t extent_count) {
  StreamingChecksum sum;
  sum.Update(base, kChecksumAt);
  sum.Update(base + kSwapFixedHeaderBytes, extent_count * kSwapExtentRecordBytes);
  return sum.Digest();
}

}  // namespace

uint64_t SwapSlotBytes(uint32_t max_extents) {
  return AlignUp(kSwapFixedHeaderBytes + uint64_t{max_extents} * kSwapExtentRecordBytes,
                 kIoAlignment);
}

uint64_t SwapDataOffset(uint64_t slot_bytes) { return AlignUp(2 * slot_bytes, kSwapDataAlignment); }

std::vector<std::byte> EncodeSwapHeader(const SwapHeader& header) {
  const auto count = static_cast<uint32_t>(header.extents.size());
  std::vector<std::byte> out(
      AlignUp(kSwapFixedHeaderBytes + count * kSwapExtentRecordBytes, kIoAlignment));
  std::byte* base = out.data();
  std::memcpy(base, kSwapMagic, sizeof(kSwapMagic));
  Put<uint32_t>(base, kVersionAt, kSwapFormatVersion);
  Put<uint32_t>(base, kFixedBytesAt, kSwapFixedHeaderBytes);
  Put<uint32_t>(base, kRecordBytesAt, kSwapExtentRecordBytes);
  Put<uint32_t>(base, kRankAt, header.rank);
  Put<uint64_t>(base, kGenerationAt, header.generation);
  Put<uint64_t>(base, kStoreIdAt, header.store_id);
  Put<uint32_t>(base, kStripeCountAt, header.stripe_count);
  Put<uint32_t>(base, kStripeIndexAt, header.stripe_index);
  Put<uint64_t>(base, kStripeSizeAt, header.stripe_size);
  Put<uint64_t>(base, kSlotBytesAt, header.slot_bytes);
  Put<uint64_t>(base, kDataOffsetAt, header.data_offset);
  Put<uint64_t>(base, kCapacityAt, header.capacity);
  Put<uint32_t>(base, kMaxExtentsAt, header.max_extents);
  Put<uint32_t>(base, kExtentCountAt, count);
  for (uint32_t i = 0; i < count; ++i) {
    const SwapExtentRecord& extent = header.extents[i];
    std::byte* record = base + kSwapFixedHeaderBytes + i * kSwapExtentRecordBytes;
    SLUICE_CHECK_LE(extent.name.size(), kSwapMaxNameBytes);
    std::memcpy(record, extent.name.data(), extent.name.size());
    Put<uint64_t>(record, kOffsetAt, extent.offset);
    Put<uint64_t>(record, kCapacityRecAt, extent.capacity);
    Put<uint64_t>(record, kLengthAt, extent.length);
    Put<uint64_t>(record, kChecksumRecAt, extent.checksum);
    Put<uint32_t>(record, kFlagsAt, extent.flags);
    Put<uint32_t>(record, kChunkShiftAt, extent.checksum_chunk_shift);
  }
  Put<uint64_t>(base, kChecksumAt, HeaderChecksum(base, count));
  return out;
}

Result<SwapHeader> PeekSwapHeader(std::span<const std::byte> fixed, const std::string& where) {
  if (fixed.size() < kSwapFixedHeaderBytes) {
    return DataLossError("{}: header is {} bytes, shorter than the {}-byte fixed part", where,
                         fixed.size(), kSwapFixedHeaderBytes);
  }
  const std::byte* base = fixed.data();
  if (std::memcmp(base, kSwapMagic, sizeof(kSwapMagic)) != 0) {
    std::string seen;
    for (size_t i = 0; i < sizeof(kSwapMagic); ++i) {
      const auto c = static_cast<unsigned char>(base[i]);
      seen += (c >= 32 && c < 127) ? static_cast<char>(c) : '.';
    }
    return DataLossError(
        "{}: field 'magic' is \"{}\", expected \"SLUICESW\" (not a Sluice swap "
        "file, or an unwritten slot)",
        where, seen);
  }
  const auto version = Get<uint32_t>(base, kVersionAt);
  if (version != kSwapFormatVersion) {
    // Not damage: a file of another Sluice release. Swap files are scratch space for one run.
    return FailedPreconditionError(
        "{}: field 'version' is {}, but this build reads swap format version {} only (the file "
        "was written by {} Sluice; delete it and create the swap store anew)",
        where, version, kSwapFormatVersion, version < kSwapFormatVersion ? "an older" : "a newer");
  }
  if (Get<uint32_t>(base, kFixedBytesAt) != kSwapFixedHeaderBytes ||
      Get<uint32_t>(base, kRecordBytesAt) != kSwapExtentRecordBytes) {
    return DataLossError(
        "{}: fields 'fixed_header_bytes'/'extent_record_bytes' are {}/{}, "
        "expected {}/{}",
        where, Get<uint32_t>(base, kFixedBytesAt), Get<uint32_t>(base, kRecordBytesAt),
        kSwapFixedHeaderBytes, kSwapExtentRecordBytes);
  }
  SwapHeader header;
  header.rank = Get<uint32_t>(base, kRankAt);
  header.generation = Get<uint64_t>(base, kGenerationAt);
  header.store_id = Get<uint64_t>(base, kStoreIdAt);
  header.stripe_count = Get<uint32_t>(base, kStripeCountAt);
  header.stripe_index = Get<uint32_t>(base, kStripeIndexAt);
  header.stripe_size = Get<uint64_t>(base, kStripeSizeAt);
  header.slot_bytes = Get<uint64_t>(base, kSlotBytesAt);
  header.data_offset = Get<uint64_t>(base, kDataOffsetAt);
  header.capacity = Get<uint64_t>(base, kCapacityAt);
  header.max_extents = Get<uint32_t>(base, kMaxExtentsAt);
  if (header.slot_bytes != SwapSlotBytes(header.max_extents)) {
    return DataLossError("{}: field 'slot_bytes' is {}, but max_extents {} needs {}", where,
                         header.slot_bytes, header.max_extents, SwapSlotBytes(header.max_extents));
  }
  return header;
}

Result<SwapHeader> DecodeSwapHeader(std::span<const std::byte> slot, const std::string& where) {
  SLUICE_ASSIGN_OR_RETURN(SwapHeader header, PeekSwapHeader(slot, where));
  const std::byte* base = slot.data();
  const auto count = Get<uint32_t>(base, kExtentCountAt);
  if (count > header.max_extents) {
    return DataLossError("{}: field 'extent_count' is {}, more than max_extents {}", where, count,
                         header.max_extents);
  }
  if (kSwapFixedHeaderBytes + uint64_t{count} * kSwapExtentRecordBytes > slot.size()) {
    return DataLossError("{}: field 'extent_count' is {}, but only {} header bytes were read",
                         where, count, slot.size());
  }
  const auto stored = Get<uint64_t>(base, kChecksumAt);
  const uint64_t computed = HeaderChecksum(base, count);
  if (stored != computed) {
    return DataLossError(
        "{}: field 'header_checksum' is {:#018x}, but the header hashes to "
        "{:#018x} (a torn or corrupted header)",
        where, stored, computed);
  }
  header.extents.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const std::byte* record = base + kSwapFixedHeaderBytes + i * kSwapExtentRecordBytes;
    SwapExtentRecord& extent = header.extents[i];
    const auto* name = reinterpret_cast<const char*>(record);
    const size_t length = strnlen(name, kNameField);
    if (length == 0 || length > kSwapMaxNameBytes) {
      return DataLossError("{}: extent record {} has an invalid name", where, i);
    }
    extent.name.assign(name, length);
    extent.offset = Get<uint64_t>(record, kOffsetAt);
    extent.capacity = Get<uint64_t>(record, kCapacityRecAt);
    extent.length = Get<uint64_t>(record, kLengthAt);
    extent.checksum = Get<uint64_t>(record, kChecksumRecAt);
    extent.flags = Get<uint32_t>(record, kFlagsAt);
    extent.checksum_chunk_shift = Get<uint32_t>(record, kChunkShiftAt);
  }
  return header;
}

}  // namespace sluice::offload
