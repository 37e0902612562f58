#include "offload/aio_options.h"

#include <fmt/format.h>

#include "offload/aligned_buffer.h"

namespace sluice::offload {

std::string_view AioBackendName(AioBackendKind kind) {
  switch (kind) {
    case AioBackendKind::kAuto:
      return "auto";
    case AioBackendKind::kIoUring:
      return "io_uring";
    case AioBackendKind::kThreadPool:
      return "threadpool";
  }
  return "?";
}

Result<AioBackendKind> ParseAioBackend(std::string_view name) {
  if (name == "auto") return AioBackendKind::kAuto;
  if (name == "io_uring" || name == "uring") return AioBackendKind::kIoUring;
  if (name == "threadpool" || name == "thread_pool" || name == "pread") {
    return AioBackendKind::kThreadPool;
  }
  return InvalidArgumentError("unknown aio backend '{}': use auto, io_uring or threadpool", name);
}

Status ValidateAioOptions(const AioOptions& options) {
  if (options.block_size == 0 || !IsAligned(options.block_size)) {
    return InvalidArgumentError(
        "aio.block_size must be a positive multiple of {} bytes (O_DIRECT alignment), got {}",
        kIoAlignment, options.block_size);
  }
  if (options.block_size > (1ull << 30)) {
    return InvalidArgumentError("aio.block_size must be at most 1 GiB, got {}", options.block_size);
  }
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return InvalidArgumentError("aio.queue_depth must be in [1, 4096], got {}",
                                options.queue_depth);
  }
  if (options.intra_op_parallelism < 1 || options.intra_op_parallelism > 64) {
    return InvalidArgumentError("aio.intra_op_parallelism must be in [1, 64], got {}",
                                options.intra_op_parallelism);
  }
  if (!IsAligned(options.debug_short_io_bytes)) {
    return InvalidArgumentError("debug_short_io_bytes must be a multiple of {}, got {}",
                                kIoAlignment, options.debug_short_io_bytes);
  }
  return OkStatus();
}

std::string DescribeAioOptions(const AioOptions& options) {
  return fmt::format(
      "block_size={} queue_depth={} intra_op_parallelism={} single_submit={} "
      "overlap_events={} backend={} direct_io={}",
      options.block_size, options.queue_depth, options.intra_op_parallelism, options.single_submit,
      options.overlap_events, AioBackendName(options.backend), options.direct_io);
}

}  // namespace sluice::offload
