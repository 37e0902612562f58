#include "engine/checkpoint/shard_format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "offload/checksum.h"

namespace sluice::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian and is written with memcpy");

constexpr size_t kHeaderChecksumOffset = 88;

class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  template <typename T>
  void Put(T value) {
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    out_->append(raw, sizeof(T));
  }
  void PutBytes(std::string_view bytes) { out_->append(bytes); }

 private:
  std::string* out_;
};

// Reads fields of a table; every failure names the file, the entry being read, the field and
// its absolute offset.
class ByteReader {
 public:
  ByteReader(std::string_view bytes, uint64_t base, const std::filesystem::path& path)
      : bytes_(bytes), base_(base), path_(path) {}

  uint64_t offset() const { return base_ + pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  bool done() const { return pos_ == bytes_.size(); }
  void set_entry(std::string entry) { entry_ = std::move(entry); }

  template <typename T>
  Result<T> Get(std::string_view field) {
    if (bytes_.size() - pos_ < sizeof(T)) return Truncated(field, sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  Result<std::string> GetString(std::string_view field, size_t length) {
    if (bytes_.size() - pos_ < length) return Truncated(field, length);
    std::string value(bytes_.substr(pos_, length));
    pos_ += length;
    return value;
  }
  Status Error(std::string_view field, uint64_t field_offset, std::string_view problem) const {
    return DataLossError("{}: {}field '{}' at offset {}: {}", path_.string(),
                         entry_.empty() ? "" : "tensor '" + entry_ + "' ", field, field_offset,
                         problem);
  }

 private:
  Status Truncated(std::string_view field, size_t need) const {
    return Error(
        field, offset(),
        fmt::format("needs {} bytes but the table ends after {}", need, bytes_.size() - pos_));
  }

  std::string_view bytes_;
  size_t pos_ = 0;
  uint64_t base_;
  const std::filesystem::path& path_;
  std::string entry_;
};

template <typename T>
T Load(std::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

std::string Printable(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", static_cast<uint8_t>(c));
    }
  }
  return out;
}

}  // namespace

std::string_view StateKindName(StateKind kind) {
  switch (kind) {
    case StateKind::kMasterWeights:
      return "master";
    case StateKind::kExpAvg:
      return "exp_avg";
    case StateKind::kExpAvgSq:
      return "exp_avg_sq";
  }
  return "?";
}

Result<StateKind> ParseStateKind(std::string_view name) {
  for (StateKind kind : kAllStateKinds) {
    if (StateKindName(kind) == name) return kind;
  }
  return InvalidArgumentError("unknown state kind '{}' (known: master, exp_avg, exp_avg_sq)", name);
}

ShardGroup GroupOf(StateKind kind) {
  return kind == StateKind::kMasterWeights ? ShardGroup::kWeights : ShardGroup::kOptimizer;
}

std::string_view ShardGroupName(ShardGroup group) {
  return group == ShardGroup::kWeights ? "weights" : "optimizer";
}

Result<ShardGroup> ParseShardGroup(std::string_view name) {
  for (ShardGroup group : kAllShardGroups) {
    if (ShardGroupName(group) == name) return group;
  }
  return InvalidArgumentError("unknown shard file group '{}' (known: weights, optimizer)", name);
}

std::string ShardFileName(ShardGroup group, int rank) {
  return fmt::format("{}.rank{:05d}.bin", ShardGroupName(group), rank);
}

std::string ShardTensorInfo::Label() const {
  return fmt::format("{}/{}", StateKindName(kind), name);
}

uint64_t BlockCount(uint64_t data_bytes, uint64_t block_bytes) {
  return block_bytes == 0 ? 0 : (data_bytes + block_bytes - 1) / block_bytes;
}

std::optional<int64_t> StoredElementCount(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(Shape::kMaxRank)) return std::nullopt;
  int64_t numel = 1;
  for (int64_t d : dims) {
    // Shape's own rule (runtime/tensor.cpp): no partial count may pass int64, even before a 0.
    if (d < 0 || (d != 0 && numel > std::numeric_limits<int64_t>::max() / d)) return std::nullopt;
    numel *= d;
  }
  return numel;
}

std::string EncodeShardHeader(const ShardHeader& header) {
  std::string out;
  ByteWriter w(&out);
  w.PutBytes(std::string_view(kShardMagic, sizeof(kShardMagic)));
  w.Put<uint32_t>(header.version);
  w.Put<uint32_t>(kShardHeaderBytes);
  w.Put<uint32_t>(static_cast<uint32_t>(header.group));
  w.Put<uint32_t>(header.rank);
  w.Put<uint32_t>(header.world);
  w.Put<uint32_t>(header.tensor_count);
  w.Put<uint64_t>(header.block_bytes);
  w.Put<uint64_t>(header.table_offset);
  w.Put<uint64_t>(header.table_bytes);
  w.Put<uint64_t>(header.table_checksum);
  w.Put<uint64_t>(header.data_offset);
  w.Put<uint64_t>(header.data_bytes);
  w.Put<uint64_t>(0);  // reserved
  SLUICE_CHECK_EQ(out.size(), kHeaderChecksumOffset);
  w.Put<uint64_t>(offload::Checksum64(out.data(), out.size()));
  SLUICE_CHECK_EQ(out.size(), size_t{kShardHeaderBytes});
  return out;
}

Result<ShardHeader> DecodeShardHeader(std::string_view bytes, const std::filesystem::path& path) {
  auto error = [&](std::string_view field, size_t offset, std::string problem) {
    return DataLossError("{}: header field '{}' at offset {}: {}", path.string(), field, offset,
                         problem);
  };
  if (bytes.size() < kShardHeaderBytes) {
    return error("header", 0,
                 fmt::format("the file has {} bytes, a shard header needs {}: truncated",
                             bytes.size(), kShardHeaderBytes));
  }
  if (std::memcmp(bytes.data(), kShardMagic, sizeof(kShardMagic)) != 0) {
    return error("magic", 0,
                 fmt::format("'{}' is not '{}': not a Sluice checkpoint shard file",
                             Printable(bytes.substr(0, 8)), std::string_view(kShardMagic, 8)));
  }
  ShardHeader h;
  h.version = Load<uint32_t>(bytes, 8);
  if (h.version != kShardFormatVersion) {
    return error("version", 8,
                 fmt::format("format version {} but this Sluice reads version {}", h.version,
                             kShardFormatVersion));
  }
  const uint32_t header_bytes = Load<uint32_t>(bytes, 12);
  if (header_bytes != kShardHeaderBytes) {
    return error("header_bytes", 12,
                 fmt::format("{} instead of {}", header_bytes, kShardHeaderBytes));
  }
  const uint64_t stored = Load<uint64_t>(bytes, kHeaderChecksumOffset);
  const uint64_t computed = offload::Checksum64(bytes.data(), kHeaderChecksumOffset);
  if (stored != computed) {
    return error(
        "header_checksum", kHeaderChecksumOffset,
        fmt::format("stored {:#018x}, computed {:#018x}: the header is corrupt", stored, computed));
  }
  const uint32_t group = Load<uint32_t>(bytes, 16);
  if (group != static_cast<uint32_t>(ShardGroup::kWeights) &&
      group != static_cast<uint32_t>(ShardGroup::kOptimizer)) {
    return error("group", 16, fmt::format("unknown file group {}", group));
  }
  h.group = static_cast<ShardGroup>(group);
  h.rank = Load<uint32_t>(bytes, 20);
  h.world = Load<uint32_t>(bytes, 24);
  h.tensor_count = Load<uint32_t>(bytes, 28);
  h.block_bytes = Load<uint64_t>(bytes, 32);
  h.table_offset = Load<uint64_t>(bytes, 40);
  h.table_bytes = Load<uint64_t>(bytes, 48);
  h.table_checksum = Load<uint64_t>(bytes, 56);
  h.data_offset = Load<uint64_t>(bytes, 64);
  h.data_bytes = Load<uint64_t>(bytes, 72);
  h.header_checksum = stored;
  if (h.world == 0 || h.rank >= h.world) {
    return error("rank", 20, fmt::format("rank {} of world {}", h.rank, h.world));
  }
  if (h.block_bytes == 0) return error("block_bytes", 32, "zero");
  if (h.table_offset != kShardHeaderBytes) {
    return error("table_offset", 40,
                 fmt::format("{} instead of {}", h.table_offset, kShardHeaderBytes));
  }
  // Without wrapping: a table_bytes near 2^64 must not pass as a small table (and size a buffer).
  if (h.data_offset < h.table_offset || h.table_bytes > h.data_offset - h.table_offset) {
    return error("data_offset", 64,
                 fmt::format("{} lies inside the table [{}, {})", h.data_offset, h.table_offset,
                             h.table_offset + h.table_bytes));
  }
  if (h.data_bytes > std::numeric_limits<uint64_t>::max() - h.data_offset) {
    return error("data_bytes", 72, fmt::format("{} overflows", h.data_bytes));
  }
  return h;
}

std::string EncodeShardTable(const std::vector<ShardEntry>& entries) {
  std::string out;
  ByteWriter w(&out);
  for (const ShardEntry& e : entries) {
    w.Put<uint8_t>(static_cast<uint8_t>(e.kind));
    w.Put<uint8_t>(static_cast<uint8_t>(e.dtype));
    w.Put<uint8_t>(static_cast<uint8_t>(e.shape.rank()));
    w.Put<uint8_t>(0);
    w.Put<uint32_t>(static_cast<uint32_t>(e.name.size()));
    w.PutBytes(e.name);
    for (int64_t d : e.shape.dims()) w.Put<int64_t>(d);
    w.Put<int64_t>(e.begin);
    w.Put<int64_t>(e.end);
    w.Put<uint64_t>(e.data_offset);
    w.Put<uint64_t>(e.data_bytes);
    w.Put<uint64_t>(e.block_checksums.size());
    for (uint64_t c : e.block_checksums) w.Put<uint64_t>(c);
  }
  return out;
}

Result<std::vector<ShardEntry>> DecodeShardTable(std::string_view bytes, const ShardHeader& header,
                                                 const std::filesystem::path& path) {
  ByteReader r(bytes, header.table_offset, path);
  std::vector<ShardEntry> entries;
  // tensor_count is up to 2^32 - 1: reserve no more entries than the table can hold (kind, dtype,
  // ndim, reserved, name length, a 1-byte name, begin, end, data offset and size, block count).
  constexpr size_t kMinEntryBytes = 4 + 4 + 1 + 5 * 8;
  entries.reserve(std::min<size_t>(header.tensor_count, bytes.size() / kMinEntryBytes));
  for (uint32_t i = 0; i < header.tensor_count; ++i) {
    ShardEntry e;
    e.table_position = r.offset();
    r.set_entry(fmt::format("#{}", i));
    uint64_t at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(uint8_t kind, r.Get<uint8_t>("kind"));
    if (kind > static_cast<uint8_t>(StateKind::kExpAvgSq)) {
      return r.Error("kind", at, fmt::format("unknown state kind {}", kind));
    }
    e.kind = static_cast<StateKind>(kind);
    if (GroupOf(e.kind) != header.group) {
      return r.Error("kind", at,
                     fmt::format("{} does not belong in a {} file", StateKindName(e.kind),
                                 ShardGroupName(header.group)));
    }
    at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(uint8_t dtype, r.Get<uint8_t>("dtype"));
    if (dtype > static_cast<uint8_t>(DType::kF16)) {
      return r.Error("dtype", at, fmt::format("unknown dtype {}", dtype));
    }
    e.dtype = static_cast<DType>(dtype);
    at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(uint8_t ndim, r.Get<uint8_t>("ndim"));
    if (ndim > Shape::kMaxRank) {
      return r.Error("ndim", at, fmt::format("{} dimensions, at most {}", ndim, Shape::kMaxRank));
    }
    SLUICE_RETURN_IF_ERROR(r.Get<uint8_t>("reserved"));
    at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(uint32_t name_len, r.Get<uint32_t>("name_length"));
    if (name_len == 0 || name_len > 4096) {
      return r.Error("name_length", at, fmt::format("{} is not in [1, 4096]", name_len));
    }
    SLUICE_ASSIGN_OR_RETURN(e.name, r.GetString("name", name_len));
    r.set_entry(e.Label());
    std::vector<int64_t> dims(ndim);
    for (uint8_t d = 0; d < ndim; ++d) {
      at = r.offset();
      SLUICE_ASSIGN_OR_RETURN(dims[d], r.Get<int64_t>("shape"));
      if (dims[d] < 0) return r.Error("shape", at, fmt::format("dimension {} is {}", d, dims[d]));
    }
    const std::optional<int64_t> count = StoredElementCount(dims);
    if (!count) {
      return r.Error("shape", at,
                     fmt::format("[{}] has more elements than fit in int64", fmt::join(dims, ", ")));
    }
    e.shape = Shape(std::span<const int64_t>(dims));
    const int64_t numel = *count;
    const uint64_t begin_at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(e.begin, r.Get<int64_t>("begin"));
    const uint64_t end_at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(e.end, r.Get<int64_t>("end"));
    if (e.begin < 0 || e.begin > e.end) {
      return r.Error("begin", begin_at,
                     fmt::format("range [{}, {}) is not ordered", e.begin, e.end));
    }
    if (e.end > numel) {
      return r.Error("end", end_at,
                     fmt::format("{} is past the tensor's {} elements (shape {})", e.end, numel,
                                 e.shape.ToString()));
    }
    at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(e.data_offset, r.Get<uint64_t>("data_offset"));
    const uint64_t bytes_at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(e.data_bytes, r.Get<uint64_t>("data_bytes"));
    // A range of 2^62 elements must not wrap to a few bytes.
    uint64_t expected_bytes = 0;
    const bool bytes_overflow = __builtin_mul_overflow(static_cast<uint64_t>(e.elements()),
                                                       uint64_t{DTypeSize(e.dtype)},
                                                       &expected_bytes);
    if (bytes_overflow) {
      return r.Error("end", end_at,
                     fmt::format("range [{}, {}) of {} is more than 2^64 bytes", e.begin, e.end,
                                 DTypeName(e.dtype)));
    }
    if (e.data_bytes != expected_bytes) {
      return r.Error("data_bytes", bytes_at,
                     fmt::format("{} but {} elements of {} are {} bytes", e.data_bytes,
                                 e.elements(), DTypeName(e.dtype), expected_bytes));
    }
    if (e.data_offset < header.data_offset ||
        e.data_offset - header.data_offset > header.data_bytes ||
        e.data_bytes > header.data_bytes - (e.data_offset - header.data_offset)) {
      return r.Error("data_offset", at,
                     fmt::format("bytes [{}, {}) are outside the data section [{}, {})",
                                 e.data_offset, e.data_offset + e.data_bytes, header.data_offset,
                                 header.data_offset + header.data_bytes));
    }
    at = r.offset();
    SLUICE_ASSIGN_OR_RETURN(uint64_t blocks, r.Get<uint64_t>("block_count"));
    if (blocks != BlockCount(e.data_bytes, header.block_bytes)) {
      return r.Error("block_count", at,
                     fmt::format("{} but {} bytes in blocks of {} need {}", blocks, e.data_bytes,
                                 header.block_bytes, BlockCount(e.data_bytes, header.block_bytes)));
    }
    // Checked before the checksums are allocated: a count the table cannot hold is truncation.
    if (blocks > r.remaining() / sizeof(uint64_t)) {
      return r.Error("block_checksum", r.offset(),
                     fmt::format("{} checksums of 8 bytes but the table ends after {} bytes",
                                 blocks, r.remaining()));
    }
    e.block_checksums.resize(blocks);
    for (uint64_t b = 0; b < blocks; ++b) {
      SLUICE_ASSIGN_OR_RETURN(e.block_checksums[b], r.Get<uint64_t>("block_checksum"));
    }
    entries.push_back(std::move(e));
  }
  if (!r.done()) {
    r.set_entry("");
    return r.Error(
        "table_bytes", 48,
        fmt::format("{} bytes left after the {} tensors the header announces",
                    header.table_offset + bytes.size() - r.offset(), header.tensor_count));
  }
  return entries;
}

}  // namespace sluice::checkpoint
