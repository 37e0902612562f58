// The per-rank binary shard file of a checkpoint (docs/checkpoint_format.md): a fixed header
// (magic, version, layout, checksums), a tensor table and the data. Each entry of the table holds
// the [begin, end) range of one flattened tensor that the rank owns, where its bytes are and an
// XXH3-64 checksum per block of them, so a reader verifies exactly the blocks it reads.
//
// Master weights and optimizer moments go to different files (ShardGroup), so the weights can be
// read without touching the moments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace sluice::checkpoint {

// What a tensor of the checkpoint holds.
enum class StateKind : uint8_t { kMasterWeights = 0, kExpAvg = 1, kExpAvgSq = 2 };
inline constexpr StateKind kAllStateKinds[] = {StateKind::kMasterWeights, StateKind::kExpAvg,
                                               StateKind::kExpAvgSq};
std::string_view StateKindName(StateKind kind);  // "master", "exp_avg", "exp_avg_sq"
Result<StateKind> ParseStateKind(std::string_view name);

// Which file of a rank a kind lives in.
enum class ShardGroup : uint8_t { kWeights = 1, kOptimizer = 2 };
inline constexpr ShardGroup kAllShardGroups[] = {ShardGroup::kWeights, ShardGroup::kOptimizer};
ShardGroup GroupOf(StateKind kind);
std::string_view ShardGroupName(ShardGroup group);  // "weights", "optimizer"
Result<ShardGroup> ParseShardGroup(std::string_view name);
// "weights.rank00003.bin"
std::string ShardFileName(ShardGroup group, int rank);

inline constexpr char kShardMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'C', 'K'};
inline constexpr uint32_t kShardFormatVersion = 1;
inline constexpr uint32_t kShardHeaderBytes = 96;
inline constexpr uint64_t kDefaultChecksumBlockBytes = uint64_t{1} << 20;
inline constexpr uint64_t kShardDataAlignment = 64;

// A tensor of a shard file without its data: elements [begin, end) of the flattened tensor
// `name` of full shape `shape`.
struct ShardTensorInfo {
  StateKind kind = StateKind::kMasterWeights;
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  int64_t begin = 0;
  int64_t end = 0;

  int64_t elements() const { return end - begin; }
  // "master/transformer.h.0.attn.c_attn.weight"
  std::string Label() const;
};

// What a rank hands the writer in one piece: the tensor and its `end - begin` contiguous
// elements of `dtype` at `data`.
struct ShardTensor : ShardTensorInfo {
  const void* data = nullptr;
};

struct ShardHeader {
  uint32_t version = kShardFormatVersion;
  ShardGroup group = ShardGroup::kWeights;
  uint32_t rank = 0;
  uint32_t world = 1;
  uint32_t tensor_count = 0;
  uint64_t block_bytes = kDefaultChecksumBlockBytes;
  uint64_t table_offset = kShardHeaderBytes;
  uint64_t table_bytes = 0;
  uint64_t table_checksum = 0;
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;
  // XXH3-64 of bytes [0, 88), as read by DecodeShardHeader (EncodeShardHeader computes it). It
  // covers table_checksum, which covers every block checksum, so it identifies the file's whole
  // content: the manifest records it per file (ManifestFile::checksum).
  uint64_t header_checksum = 0;
};

// A tensor as the shard table records it: where its data is and the checksums of its blocks.
struct ShardEntry : ShardTensorInfo {
  uint64_t data_offset = 0;  // absolute offset in the file
  uint64_t data_bytes = 0;
  std::vector<uint64_t> block_checksums;  // one per block_bytes of the data, the last shorter
  uint64_t table_position = 0;            // offset of the entry in the file (for errors)
};

// 96 bytes. The header's own checksum covers its first 88 bytes.
std::string EncodeShardHeader(const ShardHeader& header);
// Validates magic, version, sizes and the header checksum; errors name `path`, the field and its
// offset.
Result<ShardHeader> DecodeShardHeader(std::string_view bytes, const std::filesystem::path& path);

std::string EncodeShardTable(const std::vector<ShardEntry>& entries);
// Parses and validates the table: known kinds and dtypes, shapes, 0 <= begin <= end <= numel,
// data inside the data section, block counts. Errors name the file, the tensor, the field and
// its offset in the file.
Result<std::vector<ShardEntry>> DecodeShardTable(std::string_view bytes, const ShardHeader& header,
                                                 const std::filesystem::path& path);

uint64_t BlockCount(uint64_t data_bytes, uint64_t block_bytes);

// The element count of a stored tensor's dimensions, or nullopt where Shape's constructor would
// CHECK-fail on them (a negative dimension, more than Shape::kMaxRank of them, or a count past
// int64): readers of the table and the manifest refuse such a shape as data loss instead.
std::optional<int64_t> StoredElementCount(std::span<const int64_t> dims);

}  // namespace sluice::checkpoint
