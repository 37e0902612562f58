#include "runtime/comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "runtime/job_abort.h"
#include "runtime/logging.h"

namespace sluice {
namespace {

// Tells the core this is a spin-wait (cheaper for a hyper-thread sibling, less power).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "?";
}

std::string_view CommOpName(CommOpKind kind) {
  switch (kind) {
    case CommOpKind::kAllReduce:
      return "all_reduce";
    case CommOpKind::kAllGather:
      return "all_gather";
    case CommOpKind::kReduceScatter:
      return "reduce_scatter";
    case CommOpKind::kBroadcast:
      return "broadcast";
    case CommOpKind::kBarrier:
      return "barrier";
    case CommOpKind::kSend:
      return "send";
    case CommOpKind::kRecv:
      return "recv";
    case CommOpKind::kSplit:
      return "split";
  }
  return "?";
}

ShardSpan ShardRange(size_t n, int world, int rank) {
  SLUICE_CHECK_GT(world, 0);
  SLUICE_CHECK(rank >= 0 && rank < world) << "rank " << rank << " of " << world;
  const size_t per_rank = (n + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
  const size_t offset = std::min(n, per_rank * static_cast<size_t>(rank));
  return ShardSpan{offset, std::min(per_rank, n - offset)};
}

std::string FormatRankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

CommHandle::CommHandle(std::unique_ptr<CommOperation> operation, double timeout_seconds)
    : operation_(std::move(operation)), timeout_seconds_(timeout_seconds) {}

CommHandle CommHandle::Finished(Status status) {
  CommHandle handle;
  handle.result_ = std::move(status);
  return handle;
}

CommHandle::CommHandle(CommHandle&& other) noexcept { *this = std::move(other); }

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    WaitDropped();
    operation_ = std::move(other.operation_);
    result_ = std::move(other.result_);
    timeout_seconds_ = other.timeout_seconds_;
    clock_started_ = other.clock_started_;
    started_ = other.started_;
    deadline_ = other.deadline_;
    other.result_.reset();
  }
  return *this;
}

CommHandle::~CommHandle() { WaitDropped(); }

void CommHandle::WaitDropped() {
  if (finished()) return;
  const Status status = Wait();
  if (!status.ok()) {
    SLUICE_LOG(kError, "comm", "a communication handle dropped without Wait() failed: {}",
               status.ToString());
  }
}

void CommHandle::StartClock() {
  if (clock_started_) return;
  clock_started_ = true;
  started_ = std::chrono::steady_clock::now();
  deadline_ = started_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(timeout_seconds_));
}

const Status& CommHandle::Finish(Status status) {
  result_ = std::move(status);
  return *result_;
}

const Status& CommHandle::Expire(std::chrono::steady_clock::time_point now) {
  const Status& status =
      Finish(operation_->Expire(std::chrono::duration<double>(now - started_).count()));
  NoteCommTimeout(status);
  return status;
}

bool CommHandle::Test() {
  if (finished()) return true;
  StartClock();
  Status status;
  if (operation_->Poll(&status)) {
    Finish(std::move(status));
    return true;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline_) {
    Expire(now);
    return true;
  }
  return false;
}

Status CommHandle::Wait() {
  if (result_.has_value()) return *result_;
  if (!operation_) return OkStatus();
  StartClock();
  // MPI advances nonblocking operations only inside calls like MPI_Test: a collective of
  // several rounds moves to its next round only when polled. So the loop polls eagerly while the
  // operation is young, as MPI_Wait would (a yield here would hand the core away for whole time
  // slices on a loaded machine), and only then sleeps with a growing pause, so that a rank
  // waiting for a late peer costs almost no CPU.
  const auto spin_until = std::chrono::steady_clock::now() + kSpinPhase;
  std::chrono::microseconds pause = kMinPollSleep;
  while (true) {
    Status status;
    if (operation_->Poll(&status)) return Finish(std::move(status));
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline_) return Expire(now);
    if (now < spin_until) {
      for (int i = 0; i < 32; ++i) CpuRelax();
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - now);
    std::this_thread::sleep_for(std::min(pause, left + std::chrono::microseconds(1)));
    pause = std::min(pause * 2, kMaxPollSleep);
  }
}

void* CommHandle::native_event() const { return finished() ? nullptr : operation_->native_event(); }

namespace internal {

Status CheckCommBuffer(std::string_view op, const void* data, size_t count, DType dtype,
                       size_t max_count) {
  // f64: the reference model's tensor-parallel all-reduces (both backends map it).
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16 &&
      dtype != DType::kF64) {
    return InvalidArgumentError("{}: unknown dtype {}", op, static_cast<int>(dtype));
  }
  if (count > max_count) {
    return InvalidArgumentError(
        "{}: {} elements exceed the backend's limit of {} per operation; split the buffer into "
        "buckets (reduce_bucket_size / stage3_prefetch_bucket_size)",
        op, count, max_count);
  }
  if (count > 0 && data == nullptr) {
    return InvalidArgumentError("{}: null buffer for {} elements", op, count);
  }
  return OkStatus();
}

Status CheckCommPeer(std::string_view op, std::string_view role, int peer, int size) {
  if (peer < 0 || peer >= size) {
    return InvalidArgumentError("{}: {} {} is not a rank of this communicator (size {})", op, role,
                                peer, size);
  }
  return OkStatus();
}

Status CheckShardPlacement(std::string_view op, const void* shard, const void* full, ShardSpan mine,
                           size_t total, DType dtype) {
  const size_t element = DTypeSize(dtype);
  const auto* shard_begin = static_cast<const char*>(shard);
  const auto* full_begin = static_cast<const char*>(full);
  const size_t shard_bytes = mine.count * element;
  const size_t full_bytes = total * element;
  if (shard_bytes == 0 || full_bytes == 0 || shard_begin == full_begin + mine.offset * element) {
    return OkStatus();
  }
  if (shard_begin < full_begin + full_bytes && full_begin < shard_begin + shard_bytes) {
    return InvalidArgumentError(
        "{}: the shard overlaps the full buffer but is not at this rank's offset {}", op,
        mine.offset);
  }
  return OkStatus();
}

std::string DescribeCommOp(const CommOpInfo& info, std::string_view comm_name) {
  const std::string_view name = CommOpName(info.kind);
  if (info.kind == CommOpKind::kSend || info.kind == CommOpKind::kRecv) {
    return fmt::format("{} of {} {} elements {} rank {} (tag {}) on {}", name, info.count,
                       DTypeName(info.dtype), info.kind == CommOpKind::kSend ? "to" : "from",
                       info.peer, info.tag, comm_name);
  }
  if (info.kind == CommOpKind::kBarrier || info.kind == CommOpKind::kSplit) {
    return fmt::format("{} #{} on {}", name, info.seq, comm_name);
  }
  std::string extra;
  if (info.reduce_op.has_value()) extra = fmt::format(", {}", ReduceOpName(*info.reduce_op));
  if (info.kind == CommOpKind::kBroadcast) extra = fmt::format(", root {}", info.peer);
  return fmt::format("{} #{} ({}, {} elements{}) on {}", name, info.seq, DTypeName(info.dtype),
                     info.count, extra, comm_name);
}

}  // namespace internal

}  // namespace sluice
