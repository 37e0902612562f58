#include "engine/checkpoint/shard_writer.h"

#include <algorithm>
#include <set>
#include <utility>

#include "runtime/durable_file.h"
#include "offload/checksum.h"

namespace sluice::checkpoint {
namespace {

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

Status ValidateShardTensor(const ShardTensor& t) {
  const std::string label = fmt::format("{}/{}", StateKindName(t.kind), t.name);
  if (t.name.empty() || t.name.size() > 4096) {
    return InvalidArgumentError("checkpoint tensor '{}': the name must have 1 to 4096 bytes",
                                label);
  }
  const int64_t numel = t.shape.numel();
  if (t.begin < 0 || t.begin > t.end || t.end > numel) {
    return InvalidArgumentError(
        "checkpoint tensor '{}': range [{}, {}) is not inside its {} elements (shape {})", label,
        t.begin, t.end, numel, t.shape.ToString());
  }
  if (t.end > t.begin && t.data == nullptr) {
    return InvalidArgumentError("checkpoint tensor '{}': {} elements with no data pointer", label,
                                t.end - t.begin);
  }
  return OkStatus();
}

Status WriteShardFile(const std::filesystem::path& path, ShardGroup group, int rank, int world,
                      std::span<const ShardTensor* const> tensors, uint64_t block_bytes) {
  SLUICE_CHECK_GT(block_bytes, 0u);
  std::set<std::pair<StateKind, std::string>> seen;
  std::vector<ShardEntry> entries;
  entries.reserve(tensors.size());
  for (const ShardTensor* t : tensors) {
    SLUICE_RETURN_IF_ERROR(ValidateShardTensor(*t));
    SLUICE_CHECK(GroupOf(t->kind) == group)
        << StateKindName(t->kind) << " handed to a " << ShardGroupName(group) << " file";
    if (!seen.emplace(t->kind, t->name).second) {
      return InvalidArgumentError("checkpoint tensor '{}/{}' is given twice by rank {}",
                                  StateKindName(t->kind), t->name, rank);
    }
    ShardEntry e;
    e.kind = t->kind;
    e.name = t->name;
    e.dtype = t->dtype;
    e.shape = t->shape;
    e.begin = t->begin;
    e.end = t->end;
    e.data_bytes = static_cast<uint64_t>(t->end - t->begin) * DTypeSize(t->dtype);
    const char* data = static_cast<const char*>(t->data);
    for (uint64_t at = 0; at < e.data_bytes; at += block_bytes) {
      e.block_checksums.push_back(
          offload::Checksum64(data + at, std::min(block_bytes, e.data_bytes - at)));
    }
    entries.push_back(std::move(e));
  }

  // The table's size does not depend on the data offsets, so encode once to size it.
  ShardHeader header;
  header.group = group;
  header.rank = static_cast<uint32_t>(rank);
  header.world = static_cast<uint32_t>(world);
  header.tensor_count = static_cast<uint32_t>(entries.size());
  header.block_bytes = block_bytes;
  header.table_bytes = EncodeShardTable(entries).size();
  header.data_offset = AlignUp(header.table_offset + header.table_bytes, kShardDataAlignment);
  uint64_t cursor = header.data_offset;
  for (ShardEntry& e : entries) {
    e.data_offset = cursor;
    cursor = AlignUp(cursor + e.data_bytes, kShardDataAlignment);
  }
  // The file ends right after the last tensor, so its size tells a truncation apart.
  const uint64_t file_end =
      entries.empty() ? header.data_offset : entries.back().data_offset + entries.back().data_bytes;
  header.data_bytes = file_end - header.data_offset;
  const std::string table = EncodeShardTable(entries);
  header.table_checksum = offload::Checksum64(table.data(), table.size());

  std::string head = EncodeShardHeader(header);
  head += table;
  head.resize(header.data_offset, '\0');
  SLUICE_ASSIGN_OR_RETURN(ScopedFd fd, CreateExclusive(path));
  SLUICE_RETURN_IF_ERROR(WriteAt(fd.get(), head.data(), head.size(), 0, path));
  const std::string padding(kShardDataAlignment, '\0');
  for (size_t i = 0; i < entries.size(); ++i) {
    const ShardEntry& e = entries[i];
    SLUICE_RETURN_IF_ERROR(WriteAt(fd.get(), tensors[i]->data, e.data_bytes, e.data_offset, path));
    const uint64_t next = i + 1 < entries.size() ? entries[i + 1].data_offset : file_end;
    const uint64_t gap = next - (e.data_offset + e.data_bytes);
    if (gap > 0) {
      SLUICE_RETURN_IF_ERROR(
          WriteAt(fd.get(), padding.data(), gap, e.data_offset + e.data_bytes, path));
    }
  }
  SLUICE_RETURN_IF_ERROR(FsyncFd(fd.get(), path));
  return fd.Close();
}

}  // namespace sluice::checkpoint
