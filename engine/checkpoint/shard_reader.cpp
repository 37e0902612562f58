#include "engine/checkpoint/shard_reader.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "offload/checksum.h"

namespace sluice::checkpoint {

Result<std::unique_ptr<ShardFileReader>> ShardFileReader::Open(const std::filesystem::path& path,
                                                               std::optional<ShardGroup> group,
                                                               std::optional<int> rank,
                                                               std::optional<int> world) {
  std::unique_ptr<ShardFileReader> reader(new ShardFileReader());
  reader->path_ = path;
  SLUICE_ASSIGN_OR_RETURN(reader->fd_, OpenForRead(path));
  const int fd = reader->fd_.get();
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, FileSize(fd, path));
  std::string head(std::min<uint64_t>(size, kShardHeaderBytes), '\0');
  SLUICE_RETURN_IF_ERROR(ReadAt(fd, head.data(), head.size(), 0, path, "the header"));
  SLUICE_ASSIGN_OR_RETURN(reader->header_, DecodeShardHeader(head, path));
  const ShardHeader& h = reader->header_;
  if (group && h.group != *group) {
    return DataLossError("{}: header field 'group' at offset 16: a {} file where a {} file belongs",
                         path.string(), ShardGroupName(h.group), ShardGroupName(*group));
  }
  if (rank && h.rank != static_cast<uint32_t>(*rank)) {
    return DataLossError("{}: header field 'rank' at offset 20: {} where rank {} belongs",
                         path.string(), h.rank, *rank);
  }
  if (world && h.world != static_cast<uint32_t>(*world)) {
    return DataLossError("{}: header field 'world' at offset 24: {} but the manifest says {}",
                         path.string(), h.world, *world);
  }
  const uint64_t expected_size = h.data_offset + h.data_bytes;
  if (size != expected_size) {
    return DataLossError(
        "{}: the file has {} bytes but its header (data_offset {} + data_bytes {}) "
        "says {}: {}",
        path.string(), size, h.data_offset, h.data_bytes, expected_size,
        size < expected_size ? "truncated" : "trailing bytes");
  }
  std::string table(h.table_bytes, '\0');
  SLUICE_RETURN_IF_ERROR(
      ReadAt(fd, table.data(), table.size(), h.table_offset, path, "the tensor table"));
  const uint64_t computed = offload::Checksum64(table.data(), table.size());
  if (computed != h.table_checksum) {
    return DataLossError(
        "{}: tensor table (offset {}, {} bytes) checksum mismatch: header field "
        "'table_checksum' at offset 56 says {:#018x}, the table hashes to "
        "{:#018x}: the table is corrupt",
        path.string(), h.table_offset, h.table_bytes, h.table_checksum, computed);
  }
  SLUICE_ASSIGN_OR_RETURN(reader->entries_, DecodeShardTable(table, h, path));
  return reader;
}

const ShardEntry* ShardFileReader::Find(StateKind kind, std::string_view name) const {
  for (const ShardEntry& e : entries_) {
    if (e.kind == kind && e.name == name) return &e;
  }
  return nullptr;
}

Status ShardFileReader::VerifyBlock(const ShardEntry& entry, uint64_t block, const char* data,
                                    uint64_t bytes) const {
  const uint64_t computed = offload::Checksum64(data, bytes);
  if (computed != entry.block_checksums[block]) {
    const uint64_t start = entry.data_offset + block * header_.block_bytes;
    return DataLossError(
        "{}: tensor '{}' block {} (file bytes [{}, {})) checksum mismatch: stored {:#018x}, "
        "computed {:#018x}: the data is corrupt; load an earlier checkpoint",
        path_.string(), entry.Label(), block, start, start + bytes, entry.block_checksums[block],
        computed);
  }
  return OkStatus();
}

Status ShardFileReader::ReadElements(const ShardEntry& entry, int64_t begin, int64_t end,
                                     void* dst) const {
  SLUICE_CHECK(begin >= entry.begin && begin <= end && end <= entry.end)
      << "range [" << begin << ", " << end << ") outside " << entry.Label() << "'s [" << entry.begin
      << ", " << entry.end << ")";
  if (begin == end) return OkStatus();
  const uint64_t esize = DTypeSize(entry.dtype);
  const uint64_t want_begin = static_cast<uint64_t>(begin - entry.begin) * esize;
  const uint64_t want_end = static_cast<uint64_t>(end - entry.begin) * esize;
  const uint64_t bb = header_.block_bytes;
  char* out = static_cast<char*>(dst);
  std::string scratch;
  for (uint64_t block = want_begin / bb; block * bb < want_end; ++block) {
    const uint64_t block_begin = block * bb;
    const uint64_t block_len = std::min(bb, entry.data_bytes - block_begin);
    const uint64_t block_end = block_begin + block_len;
    const std::string what = fmt::format("tensor '{}' block {}", entry.Label(), block);
    if (block_begin >= want_begin && block_end <= want_end) {
      // Wholly wanted: read straight into the destination and verify there.
      char* target = out + (block_begin - want_begin);
      SLUICE_RETURN_IF_ERROR(
          ReadAt(fd_.get(), target, block_len, entry.data_offset + block_begin, path_, what));
      SLUICE_RETURN_IF_ERROR(VerifyBlock(entry, block, target, block_len));
    } else {
      scratch.resize(block_len);
      SLUICE_RETURN_IF_ERROR(ReadAt(fd_.get(), scratch.data(), block_len,
                                    entry.data_offset + block_begin, path_, what));
      SLUICE_RETURN_IF_ERROR(VerifyBlock(entry, block, scratch.data(), block_len));
      const uint64_t from = std::max(block_begin, want_begin);
      const uint64_t to = std::min(block_end, want_end);
      std::memcpy(out + (from - want_begin), scratch.data() + (from - block_begin), to - from);
    }
  }
  return OkStatus();
}

Status ShardFileReader::VerifyAll() const {
  std::string scratch;
  for (const ShardEntry& e : entries_) {
    for (uint64_t block = 0; block < e.block_checksums.size(); ++block) {
      const uint64_t block_begin = block * header_.block_bytes;
      const uint64_t len = std::min(header_.block_bytes, e.data_bytes - block_begin);
      scratch.resize(len);
      SLUICE_RETURN_IF_ERROR(ReadAt(fd_.get(), scratch.data(), len, e.data_offset + block_begin,
                                    path_, fmt::format("tensor '{}' block {}", e.Label(), block)));
      SLUICE_RETURN_IF_ERROR(VerifyBlock(e, block, scratch.data(), len));
    }
  }
  return OkStatus();
}

}  // namespace sluice::checkpoint
