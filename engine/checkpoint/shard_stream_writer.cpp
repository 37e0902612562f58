#include "engine/checkpoint/shard_stream_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "offload/aligned_buffer.h"
#include "offload/checksum.h"

namespace sluice::checkpoint {
struct ShardStreamWriter::Pending {
  uint64_t written = 0;  // bytes of the tensor received so far
  // The hash of the block `written` stops inside; null at a block boundary (a whole block that
  // arrives in one piece is hashed in one call, without a state).
  std::unique_ptr<offload::StreamingChecksum> block;
};

Status ValidateShardTensorInfo(const ShardTensorInfo& t) {
  const std::string label = t.Label();
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
  return OkStatus();
}

ShardStreamWriter::~ShardStreamWriter() = default;

Result<std::unique_ptr<ShardStreamWriter>> ShardStreamWriter::Create(
    const std::filesystem::path& path, ShardGroup group, int rank, int world,
    std::vector<ShardTensorInfo> tensors, uint64_t block_bytes, const ShardFileIo& io) {
  SLUICE_CHECK_GT(block_bytes, 0u);
  std::unique_ptr<ShardStreamWriter> w(new ShardStreamWriter());
  w->path_ = path;
  // A rank may hold several slices of one tensor (a tensor-parallel piece of a row-parallel
  // weight is one per row), never one element twice.
  std::map<std::pair<StateKind, std::string>, std::map<int64_t, int64_t>> slices;
  w->tensors_.reserve(tensors.size());
  for (ShardTensorInfo& t : tensors) {
    SLUICE_RETURN_IF_ERROR(ValidateShardTensorInfo(t));
    SLUICE_CHECK(GroupOf(t.kind) == group)
        << StateKindName(t.kind) << " handed to a " << ShardGroupName(group) << " file";
    std::map<int64_t, int64_t>& held = slices[{t.kind, t.name}];
    auto next = held.lower_bound(t.begin);
    const bool overlaps_next = next != held.end() && next->first < t.end;
    const bool overlaps_previous = next != held.begin() && std::prev(next)->second > t.begin;
    if (overlaps_next || overlaps_previous || held.contains(t.begin)) {
      return InvalidArgumentError(
          "checkpoint tensor '{}' is given twice by rank {}: its slice [{}, {}) overlaps another",
          t.Label(), rank, t.begin, t.end);
    }
    held.emplace(t.begin, t.end);
    ShardEntry e;
    static_cast<ShardTensorInfo&>(e) = std::move(t);
    e.data_bytes = static_cast<uint64_t>(e.elements()) * DTypeSize(e.dtype);
    e.block_checksums.reserve(BlockCount(e.data_bytes, block_bytes));
    w->tensors_.push_back(std::move(e));
  }
  w->pending_.resize(w->tensors_.size());

  // The table's size depends on the block counts, not on the offsets or checksums in it, so an
  // encoding of the entries as they are now sizes it.
  ShardHeader& header = w->header_;
  header.group = group;
  header.rank = static_cast<uint32_t>(rank);
  header.world = static_cast<uint32_t>(world);
  header.tensor_count = static_cast<uint32_t>(w->tensors_.size());
  header.block_bytes = block_bytes;
  {
    std::vector<ShardEntry> sized = w->tensors_;
    for (ShardEntry& e : sized) e.block_checksums.resize(BlockCount(e.data_bytes, block_bytes));
    header.table_bytes = EncodeShardTable(sized).size();
  }
  header.data_offset =
      offload::AlignUp(header.table_offset + header.table_bytes, kShardDataAlignment);
  uint64_t cursor = header.data_offset;
  for (ShardEntry& e : w->tensors_) {
    e.data_offset = cursor;
    cursor = offload::AlignUp(cursor + e.data_bytes, kShardDataAlignment);
  }
  // The file ends right after the last tensor, so its size tells a truncation apart.
  header.data_bytes = w->tensors_.empty() ? 0
                                          : w->tensors_.back().data_offset +
                                                w->tensors_.back().data_bytes - header.data_offset;
  SLUICE_ASSIGN_OR_RETURN(w->sink_,
                          CreateShardFileSink(path, header.data_offset + header.data_bytes, io));
  return w;
}

void ShardStreamWriter::HashBytes(size_t index, const char* data, uint64_t bytes) {
  ShardEntry& e = tensors_[index];
  Pending& p = pending_[index];
  const uint64_t block_bytes = header_.block_bytes;
  uint64_t at = p.written;
  while (bytes > 0) {
    const uint64_t block_end = std::min((at / block_bytes + 1) * block_bytes, e.data_bytes);
    const uint64_t take = std::min(bytes, block_end - at);
    const bool whole_block = at % block_bytes == 0 && take == block_end - at;
    if (whole_block) {
      e.block_checksums.push_back(offload::Checksum64(data, take));
    } else {
      if (!p.block) p.block = std::make_unique<offload::StreamingChecksum>();
      p.block->Update(data, take);
      if (at + take == block_end) {
        e.block_checksums.push_back(p.block->Digest());
        p.block.reset();
      }
    }
    at += take;
    data += take;
    bytes -= take;
  }
}

Status ShardStreamWriter::Append(size_t index, const void* data, int64_t elements) {
  SLUICE_CHECK(!finished_) << "Append after Finish on " << path_.string();
  SLUICE_CHECK_LT(index, tensors_.size());
  const ShardEntry& e = tensors_[index];
  Pending& p = pending_[index];
  const uint64_t bytes = static_cast<uint64_t>(elements) * DTypeSize(e.dtype);
  if (elements < 0 || p.written + bytes > e.data_bytes) {
    return OutOfRangeError(
        "{}: {} more elements of checkpoint tensor '{}' after {} of its {}: the data runs past "
        "its range [{}, {})",
        path_.string(), elements, e.Label(), p.written / DTypeSize(e.dtype), e.elements(), e.begin,
        e.end);
  }
  if (bytes == 0) return OkStatus();
  if (data == nullptr) {
    return InvalidArgumentError("{}: {} elements of checkpoint tensor '{}' with no data pointer",
                                path_.string(), elements, e.Label());
  }
  const char* bytes_in = static_cast<const char*>(data);
  HashBytes(index, bytes_in, bytes);
  SLUICE_RETURN_IF_ERROR(sink_->Put(e.data_offset + p.written, bytes_in, bytes));
  p.written += bytes;
  if (p.written < e.data_bytes) return OkStatus();
  // Complete: the zeros up to the next tensor now, so that a sink staging the file in windows
  // can write each window as soon as its tensors are done.
  const uint64_t next = index + 1 < tensors_.size() ? tensors_[index + 1].data_offset
                                                    : header_.data_offset + header_.data_bytes;
  const uint64_t gap = next - (e.data_offset + e.data_bytes);
  static constexpr char kZeros[kShardDataAlignment] = {};
  SLUICE_CHECK_LT(gap, sizeof(kZeros));
  return gap == 0 ? OkStatus() : sink_->Put(e.data_offset + e.data_bytes, kZeros, gap);
}

Status ShardStreamWriter::Finish() {
  SLUICE_CHECK(!finished_) << "Finish twice on " << path_.string();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ShardEntry& e = tensors_[i];
    if (pending_[i].written != e.data_bytes) {
      return FailedPreconditionError(
          "{}: checkpoint tensor '{}' received {} of its {} elements [{}, {}) before the file was "
          "finished",
          path_.string(), e.Label(), pending_[i].written / DTypeSize(e.dtype), e.elements(),
          e.begin, e.end);
    }
  }
  const std::string table = EncodeShardTable(tensors_);
  SLUICE_CHECK_EQ(table.size(), header_.table_bytes) << path_.string();
  header_.table_checksum = offload::Checksum64(table.data(), table.size());
  std::string head = EncodeShardHeader(header_);
  head += table;
  head.resize(header_.data_offset, '\0');
  SLUICE_RETURN_IF_ERROR(sink_->Put(0, head.data(), head.size()));
  finished_ = true;
  return sink_->Finish();
}

Result<RankStreamWriter> RankStreamWriter::Create(const std::filesystem::path& dir, int rank,
                                                  int world,
                                                  std::span<const ShardTensorInfo> tensors,
                                                  uint64_t block_bytes, const ShardFileIo& io) {
  RankStreamWriter out;
  out.routes_.resize(tensors.size());
  for (ShardGroup group : kAllShardGroups) {
    std::vector<ShardTensorInfo> mine;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (GroupOf(tensors[i].kind) != group) continue;
      out.routes_[i] = {static_cast<int>(out.files_.size()), mine.size()};
      mine.push_back(tensors[i]);
    }
    SLUICE_ASSIGN_OR_RETURN(
        auto file, ShardStreamWriter::Create(dir / ShardFileName(group, rank), group, rank, world,
                                             std::move(mine), block_bytes, io));
    out.files_.push_back(std::move(file));
  }
  return out;
}

Status RankStreamWriter::Append(size_t tensor, const void* data, int64_t elements) {
  SLUICE_CHECK_LT(tensor, routes_.size());
  const Route& route = routes_[tensor];
  return files_[route.file]->Append(route.index, data, elements);
}

Status RankStreamWriter::Finish() {
  for (auto& file : files_) SLUICE_RETURN_IF_ERROR(file->Finish());
  return OkStatus();
}

}  // namespace sluice::checkpoint
