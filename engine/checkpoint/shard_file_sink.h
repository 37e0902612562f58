// Where the bytes of one shard file go (shard_stream_writer.h). The writer knows every byte's
// final offset and puts each exactly once, in any order; Finish makes the file durable (all
// bytes written, fsync'ed and closed). Two sinks write the same bytes:
//   - through the rank's I/O engine (aio_shard_sink.h): what a training checkpoint uses, so a
//     rank's checkpoint I/O and its NVMe tiers share one engine and one staging budget;
//   - buffered pwrite()s, for callers that hold no rank tiers (tools, tests of the format).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "runtime/status.h"

namespace sluice::checkpoint {

class ShardFileSink;

// Creates `path` (which must not exist) for a file of `file_bytes` and returns its sink.
using ShardSinkOpener = std::function<Result<std::unique_ptr<ShardFileSink>>(
    const std::filesystem::path& path, uint64_t file_bytes)>;

// How a rank writes its shard files: `open` (a training save: the rank's I/O engine,
// AioShardFileIo in aio_shard_sink.h), or buffered writes where it is empty. The format's own
// code never names the engine, so the tools and parsers built without it write the same bytes.
struct ShardFileIo {
  ShardSinkOpener open;
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
