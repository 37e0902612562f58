// Writing shard files (shard_format.h) as streams: the tensors are declared up front, so every
// tensor's place in the file is known before any of its data exists; the data then arrives in
// pieces, in increasing order per tensor, from any number of tensors in turn. Each piece is hashed
// into its checksum blocks and written at its final offset as it arrives (the padding after a
// tensor once the tensor is complete), and the header and the table (which hold those checksums)
// are written last, before the fsync. Memory is the table and one hashing state per unfinished
// block, never the data: a caller streaming optimizer state from NVMe holds only the pieces it is
// handing over. Written through the rank's I/O engine (AioShardFileIo, aio_shard_sink.h) the
// bytes also pass through a few staging windows; buffered (an empty ShardFileIo) they go straight to the file.
// Both give the same bytes.
//
//   SLUICE_ASSIGN_OR_RETURN(auto out, RankStreamWriter::Create(staging, rank, world, infos,
//                                                             block_bytes, AioShardFileIo(tiers)));
//   for each piece:  SLUICE_RETURN_IF_ERROR(out.Append(tensor_index, data, elements));
//   SLUICE_RETURN_IF_ERROR(out.Finish());
//
// A writer that is dropped unfinished leaves a file without a valid header (all zeros there),
// which no reader accepts; SaveCheckpoint removes the staging directory it lives in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/checkpoint/shard_file_sink.h"
#include "engine/checkpoint/shard_format.h"
#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

// InvalidArgument naming the tensor when its name, range or shape are inconsistent.
Status ValidateShardTensorInfo(const ShardTensorInfo& tensor);

// One shard file (one group of one rank).
class ShardStreamWriter {
 public:
  // Lays out `tensors` (all of `group`'s kinds, (kind, name) unique, in file order) and creates
  // `path`, which must not exist, written as `io` says. InvalidArgument naming a malformed or
  // repeated tensor.
  static Result<std::unique_ptr<ShardStreamWriter>> Create(const std::filesystem::path& path,
                                                           ShardGroup group, int rank, int world,
                                                           std::vector<ShardTensorInfo> tensors,
                                                           uint64_t block_bytes,
                                                           const ShardFileIo& io = {});
  ~ShardStreamWriter();
  ShardStreamWriter(const ShardStreamWriter&) = delete;
  ShardStreamWriter& operator=(const ShardStreamWriter&) = delete;

  // The next `elements` elements of tensor `index` (of the list given to Create), `data` holding
  // them in the tensor's dtype: hashed into the tensor's checksum blocks and written at their
  // place (with the padding after the tensor once it is complete). OutOfRange naming the tensor
  // when they run past its end.
  Status Append(size_t index, const void* data, int64_t elements);
  // Checks that every tensor received all its elements (FailedPrecondition naming the first that
  // did not), writes the table and the header, fsyncs and closes.
  Status Finish();

 private:
  struct Pending;  // a tensor's progress: bytes written, the hash of its unfinished block

  ShardStreamWriter() = default;
  void HashBytes(size_t index, const char* data, uint64_t bytes);

  std::filesystem::path path_;
  std::unique_ptr<ShardFileSink> sink_;
  ShardHeader header_;  // the file ends at data_offset + data_bytes, right after the last tensor
  std::vector<ShardEntry> tensors_;  // data offsets set; checksums filled as blocks complete
  std::vector<Pending> pending_;
  bool finished_ = false;
};

// Both shard files of one rank in `dir` (ShardFileName(group, rank)), with each tensor routed to
// its kind's file: one stream over master weights and moments together.
class RankStreamWriter {
 public:
  // `tensors` in the order they appear in the files (per group); indices for Append are
  // positions in this list. `io`: through the rank's I/O engine, or buffered.
  static Result<RankStreamWriter> Create(const std::filesystem::path& dir, int rank, int world,
                                         std::span<const ShardTensorInfo> tensors,
                                         uint64_t block_bytes = kDefaultChecksumBlockBytes,
                                         const ShardFileIo& io = {});

  Status Append(size_t tensor, const void* data, int64_t elements);
  // Finishes both files (ShardStreamWriter::Finish).
  Status Finish();

 private:
  struct Route {
    int file = 0;
    size_t index = 0;
  };
  std::vector<std::unique_ptr<ShardStreamWriter>> files_;  // one per ShardGroup
  std::vector<Route> routes_;
};

}  // namespace sluice::checkpoint
