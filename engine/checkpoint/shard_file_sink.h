// Where the bytes of one shard file go (shard_stream_writer.h). The writer knows every byte's
// final offset and puts each exactly once, in any order; Finish makes the file durable (all
// bytes written, fsync'ed and closed). Two sinks write the same bytes:
//   - through the rank's I/O engine (aio_shard_sink.h): what a training checkpoint uses, so a
//     rank's checkpoint I/O and its NVMe tiers share one engine and one staging budget;
//   - buffered pwrite()s, for callers that hold no rank tiers (tools, tests of the format).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "runtime/status.h"

namespace sluice::offload {
class RankTiers;
}

namespace sluice::checkpoint {

// How a rank writes its shard files.
struct ShardFileIo {
  // The rank's tiers: their I/O engine (created on first use) writes the files, staged through
  // page-aligned windows counted in their pinned staging budget. Null: buffered writes.
  offload::RankTiers* tiers = nullptr;
  // The staging windows of each file: the file is written in pieces of window_bytes (a
  // multiple of 4096), each once all its bytes arrived; at most `windows` are held at a time.
  uint64_t window_bytes = uint64_t{1} << 20;
  int windows = 8;
};

class ShardFileSink {
 public:
  virtual ~ShardFileSink() = default;
  // `bytes` bytes of the file at `offset`. The data may be reused once this returns.
  virtual Status Put(uint64_t offset, const void* data, uint64_t bytes) = 0;
  // Every byte was put: writes what is still staged, fsyncs and closes the file.
  virtual Status Finish() = 0;
};

// Creates `path` (which must not exist) for a file of `file_bytes`, written as `io` says.
Result<std::unique_ptr<ShardFileSink>> CreateShardFileSink(const std::filesystem::path& path,
                                                           uint64_t file_bytes,
                                                           const ShardFileIo& io);

}  // namespace sluice::checkpoint
