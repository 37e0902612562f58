// Fuzzes the swap-file header decoder (offload/swap_format.cpp) the way SwapStore::LoadHeaders
// (offload/swap_store_files.cpp) reads a file: the input is the start of a swap file; slot A's
// fixed part gives the slot size (PeekSwapHeader) when the file can hold two such slots, then
// both slots are decoded, each as given and once more with its checksum recomputed, so that the
// extent table behind the checksum is fuzzed too. An accepted header must encode back to itself.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "offload/checksum.h"
#include "offload/swap_format.h"

namespace {

using sluice::offload::SwapHeader;

constexpr size_t kExtentCountAt = 84;
constexpr size_t kChecksumAt = 248;

bool Same(const SwapHeader& a, const SwapHeader& b) {
  if (a.generation != b.generation || a.store_id != b.store_id || a.rank != b.rank ||
      a.stripe_count != b.stripe_count || a.stripe_index != b.stripe_index ||
      a.max_extents != b.max_extents || a.stripe_size != b.stripe_size ||
      a.slot_bytes != b.slot_bytes || a.data_offset != b.data_offset ||
      a.capacity != b.capacity || a.extents.size() != b.extents.size()) {
    return false;
  }
  for (size_t i = 0; i < a.extents.size(); ++i) {
    const auto& x = a.extents[i];
    const auto& y = b.extents[i];
    if (x.name != y.name || x.offset != y.offset || x.capacity != y.capacity ||
        x.length != y.length || x.checksum != y.checksum || x.flags != y.flags ||
        x.checksum_chunk_shift != y.checksum_chunk_shift) {
      return false;
    }
  }
  return true;
}

void DecodeAndCheck(std::span<const std::byte> slot, const std::string& where) {
  sluice::Result<SwapHeader> header = sluice::offload::DecodeSwapHeader(slot, where);
  if (!header.ok()) {
    SLUICE_FUZZ_EXPECT(!header.status().message().empty(), "an error without a message");
    return;
  }
  SLUICE_FUZZ_EXPECT(header->extents.size() <= header->max_extents, "%zu extents of %u",
                     header->extents.size(), header->max_extents);
  SLUICE_FUZZ_EXPECT(header->slot_bytes == sluice::offload::SwapSlotBytes(header->max_extents),
                     "slot_bytes %llu", static_cast<unsigned long long>(header->slot_bytes));
  for (const auto& e : header->extents) {
    SLUICE_FUZZ_EXPECT(!e.name.empty() && e.name.size() <= sluice::offload::kSwapMaxNameBytes,
                       "an extent name of %zu bytes", e.name.size());
  }
  // Encoding writes the used records only; the decoded fields must come back bit for bit.
  const std::vector<std::byte> encoded = sluice::offload::EncodeSwapHeader(*header);
  sluice::Result<SwapHeader> again = sluice::offload::DecodeSwapHeader(encoded, where);
  SLUICE_FUZZ_EXPECT(again.ok() && Same(*again, *header),
                     "the header as encoded does not decode to itself");
}

// The slot with its table checksum recomputed (the formula of docs/swap_format.md).
std::vector<std::byte> WithChecksum(std::span<const std::byte> slot) {
  if (slot.size() < sluice::offload::kSwapFixedHeaderBytes) return {};
  std::vector<std::byte> out(slot.begin(), slot.end());
  uint32_t count = 0;
  std::memcpy(&count, out.data() + kExtentCountAt, sizeof(count));
  const uint64_t table = uint64_t{count} * sluice::offload::kSwapExtentRecordBytes;
  if (table > out.size() - sluice::offload::kSwapFixedHeaderBytes) return {};
  sluice::offload::StreamingChecksum sum;
  sum.Update(out.data(), kChecksumAt);
  sum.Update(out.data() + sluice::offload::kSwapFixedHeaderBytes, table);
  const uint64_t digest = sum.Digest();
  std::memcpy(out.data() + kChecksumAt, &digest, sizeof(digest));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sluice::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  const std::string path = "fuzz.swp";
  // A store created with the default max_extents (offload/swap_store.h) locates slot B so.
  uint64_t slot_bytes = sluice::offload::SwapSlotBytes(4096);
  // The store believes slot A's unchecksummed slot size only where the file can hold two slots.
  if (auto peek = sluice::offload::PeekSwapHeader(
          file.first(std::min<size_t>(size, sluice::offload::kSwapFixedHeaderBytes)), path);
      peek.ok() && peek->slot_bytes <= size / 2) {
    slot_bytes = peek->slot_bytes;
  }
  for (uint64_t slot = 0; slot < 2; ++slot) {
    const std::string where = path + (slot == 0 ? ", header slot A" : ", header slot B");
    // What a read of slot_bytes at slot * slot_bytes returns from a file of `size` bytes.
    const uint64_t start = slot_bytes == 0 ? 0 : std::min<uint64_t>(slot * slot_bytes, size);
    const uint64_t got = std::min<uint64_t>(slot_bytes, size - start);
    const std::span<const std::byte> bytes = file.subspan(start, got);
    DecodeAndCheck(bytes, where);
    const std::vector<std::byte> fixed = WithChecksum(bytes);
    if (!fixed.empty()) DecodeAndCheck(fixed, where + " (checksum recomputed)");
  }
  return 0;
}
