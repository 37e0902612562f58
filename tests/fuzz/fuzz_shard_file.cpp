// Fuzzes the checkpoint shard reader (engine/checkpoint/shard_format.cpp, shard_reader.cpp,
// tensor_index.cpp): the input is a whole shard file (header, tensor table, data). It is opened
// as written, and once more with its header, table and block checksums recomputed, so that the
// table and data checks behind the checksums are fuzzed too. An accepted file's entries must lie
// in the file, hold exactly their elements' bytes, and read back (every block verified).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/shard_reader.h"
#include "engine/checkpoint/tensor_index.h"
#include "fuzz_util.h"
#include "offload/checksum.h"

namespace {

using sluice::checkpoint::ShardEntry;
using sluice::checkpoint::ShardFileReader;
using sluice::checkpoint::kShardHeaderBytes;

constexpr size_t kHeaderChecksumAt = 88;
constexpr size_t kTableBytesAt = 48;
constexpr size_t kTableChecksumAt = 56;

template <typename T>
T Load(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}
template <typename T>
void Store(std::string& s, size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof(T));
}

// Returns false when the file was rejected.
bool OpenAndCheck(const std::string& file, const char* variant) {
  const auto path = sluice::fuzz::WriteScratchFile("weights.rank00000.bin", file);
  sluice::Result<std::unique_ptr<ShardFileReader>> opened = ShardFileReader::Open(path);
  if (!opened.ok()) {
    SLUICE_FUZZ_EXPECT(!opened.status().message().empty(), "an error without a message");
    return false;
  }
  const ShardFileReader& reader = **opened;
  const auto& h = reader.header();
  for (const ShardEntry& e : reader.entries()) {
    int64_t numel = 1;
    bool fits = true;
    for (int64_t d : e.shape.dims()) fits = fits && !__builtin_mul_overflow(numel, d, &numel);
    uint64_t bytes = 0;
    fits = fits && !__builtin_mul_overflow(static_cast<uint64_t>(e.elements()),
                                           uint64_t{sluice::DTypeSize(e.dtype)}, &bytes);
    SLUICE_FUZZ_EXPECT(fits && e.begin >= 0 && e.begin <= e.end && e.end <= numel,
                       "%s: entry '%s' range [%lld, %lld) of shape %s", variant, e.name.c_str(),
                       static_cast<long long>(e.begin), static_cast<long long>(e.end),
                       e.shape.ToString().c_str());
    SLUICE_FUZZ_EXPECT(bytes == e.data_bytes && e.data_offset >= h.data_offset &&
                           e.data_offset <= file.size() &&
                           e.data_bytes <= file.size() - e.data_offset,
                       "%s: entry '%s' data [%llu, +%llu) for %lld elements", variant,
                       e.name.c_str(), static_cast<unsigned long long>(e.data_offset),
                       static_cast<unsigned long long>(e.data_bytes),
                       static_cast<long long>(e.elements()));
  }
  (void)reader.VerifyAll();
  std::vector<char> buffer;
  for (const ShardEntry& e : reader.entries()) {
    buffer.resize(e.data_bytes);
    (void)reader.ReadElements(e, e.begin, e.end, buffer.data());
    const int64_t mid = e.begin + (e.end - e.begin) / 3;
    (void)reader.ReadElements(e, mid, e.end, buffer.data());
    (void)reader.ReadElements(e, e.begin, mid, buffer.data());
  }
  const ShardFileReader* files[] = {&reader};
  (void)sluice::checkpoint::TensorIndex::Build(files);
  return true;
}

// The same file with its header and table checksums recomputed; empty when it cannot hold them.
std::string WithChecksums(std::string bytes) {
  if (bytes.size() < kShardHeaderBytes) return {};
  const uint64_t table_bytes = Load<uint64_t>(bytes, kTableBytesAt);
  if (table_bytes <= bytes.size() - kShardHeaderBytes) {
    Store<uint64_t>(bytes, kTableChecksumAt,
                    sluice::offload::Checksum64(bytes.data() + kShardHeaderBytes, table_bytes));
  }
  Store<uint64_t>(bytes, kHeaderChecksumAt,
                  sluice::offload::Checksum64(bytes.data(), kHeaderChecksumAt));
  return bytes;
}

// The file with every block checksum of its (valid) table recomputed, re-encoded.
std::string WithBlockChecksums(const std::string& bytes) {
  const auto path = sluice::fuzz::WriteScratchFile("weights.rank00000.bin", bytes);
  sluice::Result<std::unique_ptr<ShardFileReader>> opened = ShardFileReader::Open(path);
  if (!opened.ok()) return {};
  std::vector<ShardEntry> entries = (*opened)->entries();
  const uint64_t block = (*opened)->header().block_bytes;
  for (ShardEntry& e : entries) {
    for (size_t b = 0; b < e.block_checksums.size(); ++b) {
      const uint64_t from = e.data_offset + b * block;
      const uint64_t len = std::min<uint64_t>(block, e.data_bytes - b * block);
      e.block_checksums[b] = sluice::offload::Checksum64(bytes.data() + from, len);
    }
  }
  const std::string table = sluice::checkpoint::EncodeShardTable(entries);
  if (table.size() != Load<uint64_t>(bytes, kTableBytesAt)) return {};
  std::string out = bytes;
  out.replace(kShardHeaderBytes, table.size(), table);
  return WithChecksums(std::move(out));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sluice::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(sluice::fuzz::AsText(data, size));
  bool ok = OpenAndCheck(bytes, "as given");
  if (!ok) {
    std::string fixed = WithChecksums(bytes);
    if (fixed.empty() || fixed == bytes) return 0;
    ok = OpenAndCheck(fixed, "checksums recomputed");
    bytes = std::move(fixed);
  }
  if (!ok) return 0;
  const std::string blocks = WithBlockChecksums(bytes);
  if (!blocks.empty() && blocks != bytes) OpenAndCheck(blocks, "block checksums recomputed");
  return 0;
}
