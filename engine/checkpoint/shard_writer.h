// Writes one rank's shard file of one group (weights or optimizer) from tensors already in
// memory, and fsyncs it: the whole-tensor use of ShardStreamWriter (shard_stream_writer.h).
#pragma once

#include <filesystem>
#include <span>

#include "engine/checkpoint/shard_format.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

// Writes `tensors` (all of `group`'s kinds; (kind, name) unique) to a new file `path` (it must
// not exist), hashing each checksum block from memory, and fsyncs the file. InvalidArgument for
// a malformed tensor (range outside its shape, null data, duplicate), naming it.
Status WriteShardFile(const std::filesystem::path& path, ShardGroup group, int rank, int world,
                      std::span<const ShardTensor* const> tensors,
                      uint64_t block_bytes = kDefaultChecksumBlockBytes);

// InvalidArgument naming the tensor when its range, shape, dtype or data are inconsistent.
Status ValidateShardTensor(const ShardTensor& tensor);

}  // namespace sluice::checkpoint
