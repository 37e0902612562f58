// Settings of the NVMe I/O engine: DeepSpeed's `aio` section (same names, same defaults) and the
// few knobs of Sluice's own. The config layer fills this struct; the engine validates it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice::offload {

enum class AioBackendKind {
  kAuto,        // io_uring when the kernel allows it, else the thread pool (with a warning)
  kIoUring,     // io_uring or an error
  kThreadPool,  // pread/pwrite on worker threads
};

std::string_view AioBackendName(AioBackendKind kind);
Result<AioBackendKind> ParseAioBackend(std::string_view name);  // "auto", "io_uring", "threadpool"

struct AioOptions {
  // aio.block_size: a request is split into chunks of at most this many bytes (a multiple of 4096).
  uint64_t block_size = 1ull << 20;
  // aio.queue_depth: chunks in flight per ring (io_uring) or worker threads per lane (pool).
  int queue_depth = 8;
  // aio.intra_op_parallelism: rings (each with its completion thread); chunks of every request
  // are spread over them round-robin.
  int intra_op_parallelism = 1;
  // aio.single_submit: one io_uring_submit per chunk instead of one per batch.
  bool single_submit = false;
  // aio.overlap_events: refill the ring as each completion arrives; false submits a full batch,
  // drains it, then submits the next (DeepSpeed's sequential mode).
  bool overlap_events = true;

  AioBackendKind backend = AioBackendKind::kAuto;
  // O_DIRECT. A filesystem that refuses it (ramfs, some FUSE) gets buffered I/O and a warning.
  bool direct_io = true;
  // io_uring fixed buffers for memory given to AioEngine::RegisterBuffer, and fixed files.
  bool register_buffers = true;
  bool register_files = true;
  // Tests only: treat every completion as if it moved at most this many bytes (a multiple of
  // 4096), so the resubmission of short transfers is exercised on any filesystem. 0 = off.
  uint64_t debug_short_io_bytes = 0;
};

// Names the config key at fault ("aio.queue_depth must be in [1, 4096], got 0").
Status ValidateAioOptions(const AioOptions& options);

// "block_size=1048576 queue_depth=8 intra_op_parallelism=1 ..." for logs and benchmark records.
std::string DescribeAioOptions(const AioOptions& options);

}  // namespace sluice::offload
