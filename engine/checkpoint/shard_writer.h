// Writes both shard files of one rank (weights and optimizer) from tensors already in memory,
// and fsyncs them: the whole-tensor use of RankStreamWriter (shard_stream_writer.h), through the
// rank's I/O engine when `io` opens through it (AioShardFileIo), else buffered.
#pragma once

#include <filesystem>
#include <span>

#include "engine/checkpoint/shard_file_sink.h"
#include "engine/checkpoint/shard_format.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

// Writes `tensors` ((kind, name) unique; each routed to its kind's file) to the new files
// ShardFileName(group, rank) in `dir` (they must not exist), hashing each checksum block from
// memory. InvalidArgument naming a malformed or repeated tensor, or one with no data.
Status WriteRankShardFiles(const std::filesystem::path& dir, int rank, int world,
                           std::span<const ShardTensor> tensors,
                           uint64_t block_bytes = kDefaultChecksumBlockBytes,
                           const ShardFileIo& io = {});

}  // namespace sluice::checkpoint
