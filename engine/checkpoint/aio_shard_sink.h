// A shard file written through the rank's I/O engine (offload/aio_engine.h): O_DIRECT where the
// filesystem allows it (the engine opens the file buffered where it refuses, and runs a thread
// pool where io_uring is unavailable: no fallback of its own here).
//
// O_DIRECT wants every write 4096-aligned in offset, length and memory, while the shard format
// aligns tensors at 64 bytes and the file ends right after the last tensor. So the file is
// staged in windows of AioShardWindows::window_bytes: a window gathers the bytes put into its range
// in a page-aligned, mlock()ed buffer and is written, asynchronously, as soon as every byte of
// it arrived (the last window rounded up to 4096 bytes and the file truncated back to its size
// before the fsync). A stream in tensor order keeps one or two windows open per write position;
// when more are open than buffers exist, the least recently used one is written as it stands
// and read back when its remaining bytes arrive, so any order of Puts works in bounded memory.
// The buffers (windows x window_bytes, at most the file's size) are reserved from the rank's
// pinned staging budget for the sink's life.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "engine/checkpoint/shard_file_sink.h"
#include "offload/aio_engine.h"
#include "offload/rank_tiers.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

// The staging windows of each file: the file is written in pieces of window_bytes (a multiple of
// 4096), each once all its bytes arrived; at most `windows` are held at a time.
struct AioShardWindows {
  uint64_t window_bytes = uint64_t{1} << 20;
  int windows = 8;
};

// Creates `path` exclusively (a leftover is an error, not data) and opens it on `aio`.
// ResourceExhausted naming the file when `budget` (may be null) cannot hold the staging.
Result<std::unique_ptr<ShardFileSink>> CreateAioShardSink(offload::AioEngine& aio,
                                                          offload::PinnedStagingBudget* budget,
                                                          const std::filesystem::path& path,
                                                          uint64_t file_bytes,
                                                          const AioShardWindows& windows = {});

// Shard files written through `tiers`' I/O engine (created by the first file if need be), their
// staging reserved from its pinned budget. `tiers` must outlive the writes.
ShardFileIo AioShardFileIo(offload::RankTiers& tiers, const AioShardWindows& windows = {});

}  // namespace sluice::checkpoint
