// Reads one shard file: validates the header and table when opened, then reads any element range
// of a tensor entry, verifying the checksum of every block the range touches.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/checkpoint/shard_format.h"
#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

class ShardFileReader {
 public:
  // Validates magic, version, header and table checksums, every table entry, and that the file
  // is exactly as long as the header says (DataLoss naming the file otherwise). When given, the
  // group, rank and world must match (DataLoss naming the field).
  static Result<std::unique_ptr<ShardFileReader>> Open(const std::filesystem::path& path,
                                                       std::optional<ShardGroup> group = {},
                                                       std::optional<int> rank = {},
                                                       std::optional<int> world = {});

  const std::filesystem::path& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  const std::vector<ShardEntry>& entries() const { return entries_; }
  const ShardEntry* Find(StateKind kind, std::string_view name) const;

  // Copies elements [begin, end) of the full tensor (inside the entry's own range) into `dst`,
  // in the stored dtype. DataLoss naming the file, tensor, block and offsets on a checksum
  // mismatch.
  Status ReadElements(const ShardEntry& entry, int64_t begin, int64_t end, void* dst) const;
  // Reads and verifies every block of every entry.
  Status VerifyAll() const;

 private:
  ShardFileReader() = default;
  Status VerifyBlock(const ShardEntry& entry, uint64_t block, const char* data,
                     uint64_t bytes) const;

  std::filesystem::path path_;
  ScopedFd fd_;
  ShardHeader header_;
  std::vector<ShardEntry> entries_;
};

}  // namespace sluice::checkpoint
