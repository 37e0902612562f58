// Comm: collectives between ranks, with MPI (host buffers) and NCCL (device buffers) backends.
//
//   SLUICE_ASSIGN_OR_RETURN(auto world, CreateWorldComm({}));      // runtime/comm/comm_factory.h
//   SLUICE_RETURN_IF_ERROR(world->AllReduce(grads, n, DType::kBF16, ReduceOp::kAvg));
//   CommHandle h = world->AllGatherAsync(shard, full, n, DType::kBF16);
//   ...overlap...
//   SLUICE_RETURN_IF_ERROR(h.Wait());
//
// Every operation exists as a blocking call returning Status and as an *Async call returning a
// CommHandle; the blocking call is the async call followed by Wait(). A collective that does not
// complete within the communicator's timeout (config key run.comm_timeout) fails with
// DeadlineExceeded naming the operation and the ranks that did not arrive, instead of hanging.
//
// Sharded buffers follow ZeRO-3: a flat buffer of n elements is cut into ceil(n / size) elements
// per rank, in rank order, the last rank(s) holding fewer, possibly zero (ShardRange).
//
// Rules every caller follows:
//   * all ranks of a communicator issue the same collectives in the same order (as in MPI);
//   * buffers stay valid and untouched until the handle completes;
//   * a Comm outlives the handles it returned;
//   * after a timeout the operation is still posted: MPI cannot cancel a collective. It is kept
//     ("stranded") by the communicator together with its buffers, which must stay valid, and the
//     communicator refuses new work (FailedPrecondition) until Drain() sees the stranded
//     operations complete, i.e. the late ranks arrived. Its destructor drains too. The NCCL
//     backend aborts its communicator instead; it cannot be used again.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice {

enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1 };
std::string_view ReduceOpName(ReduceOp op);  // "sum", "avg"

// The kinds of operations, as named in errors and logs.
enum class CommOpKind : uint8_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kBarrier,
  kSend,
  kRecv,
  kSplit,
};
std::string_view CommOpName(CommOpKind kind);  // "all_reduce", "all_gather", ...

// The part of a flat buffer of `n` elements that `rank` of `world` owns: ceil(n / world)
// elements per rank in rank order, the last rank(s) holding fewer (possibly zero).
struct ShardSpan {
  size_t offset = 0;
  size_t count = 0;
  bool operator==(const ShardSpan&) const = default;
};
ShardSpan ShardRange(size_t n, int world, int rank);

// "3", "0-2, 5, 7-9": sorted rank lists as errors print them.
std::string FormatRankList(std::vector<int> ranks);

// What a backend implements for one posted operation; CommHandle drives it.
class CommOperation {
 public:
  virtual ~CommOperation() = default;
  // Advances the operation without blocking. Returns true once it finished, with *status set
  // (OK or the failure); the operation is not polled again after that.
  virtual bool Poll(Status* status) = 0;
  // The timeout passed before the operation finished. Returns the error to report (naming the
  // operation and the ranks that did not arrive) and gives the operation up: the backend keeps
  // whatever is still in flight (see Comm::Drain). Not called again afterwards.
  virtual Status Expire(double waited_seconds) = 0;
  // The backend's completion event (a cudaEvent_t for NCCL), or nullptr.
  virtual void* native_event() const { return nullptr; }
};

// The result of an async operation. Move-only; one thread at a time. The timeout clock starts at
// the first Wait() or Test(), so an operation posted early and waited for late is not penalised for
// the caller's own work in between (MPI progresses operations only while someone polls them).
// The longest run.comm_timeout: 10^7 s (about 116 days). A deadline further out would overflow
// the nanosecond clock it is kept on, and every operation would time out at once.
inline constexpr double kMaxCommTimeoutSeconds = 1e7;

class CommHandle {
 public:
  CommHandle() = default;  // a finished, successful handle
  CommHandle(std::unique_ptr<CommOperation> operation, double timeout_seconds);
  static CommHandle Finished(Status status);

  CommHandle(CommHandle&& other) noexcept;
  CommHandle& operator=(CommHandle&& other) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  // A handle dropped while pending is waited for; a failure is logged.
  ~CommHandle();

  // Waits until the operation finishes or times out. Polls continuously for kSpinPhase (MPI
  // progresses operations only while polled), then sleeps between polls with a pause growing
  // from kMinPollSleep to kMaxPollSleep: a wait for a late rank costs almost no CPU. Repeated
  // calls return the same status.
  Status Wait();
  // Advances the operation once; true when it finished (successfully, with an error, or timed
  // out), after which Wait() returns at once with the status.
  bool Test();
  bool finished() const { return !operation_ || result_.has_value(); }
  // See CommOperation::native_event(); nullptr for finished and MPI handles.
  void* native_event() const;

  static constexpr std::chrono::microseconds kSpinPhase{10000};
  static constexpr std::chrono::microseconds kMinPollSleep{20};
  static constexpr std::chrono::microseconds kMaxPollSleep{250};

 private:
  void StartClock();
  const Status& Finish(Status status);
  // The timeout passed: the operation's error, also reported to NoteCommTimeout (job_abort.h).
  const Status& Expire(std::chrono::steady_clock::time_point now);
  void WaitDropped();

  std::unique_ptr<CommOperation> operation_;
  std::optional<Status> result_;
  double timeout_seconds_ = 0;
  bool clock_started_ = false;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point deadline_;
};

// A communicator: a group of ranks with a backend. Blocking calls are the async calls + Wait().
// Buffers are host memory for MPI, device memory (on the communicator's stream) for NCCL.
class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend_name() const = 0;  // "mpi", "nccl"
  // "world", "world/split(1)": names the communicator in errors.
  virtual const std::string& name() const = 0;
  // Seconds an operation may take before it fails with DeadlineExceeded (run.comm_timeout), at
  // most kMaxCommTimeoutSeconds.
  virtual double timeout_seconds() const = 0;
  virtual void SetTimeout(double seconds) = 0;

  // Every rank passes `count` elements in `data`; afterwards each holds their sum (or average,
  // computed as the sum divided by size(); bf16/f16 add in f32 and round once per addition).
  virtual CommHandle AllReduceAsync(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  // `shard` holds this rank's ShardRange(total, size(), rank()).count elements; `full`
  // (total elements) receives every rank's shard at its offset. `shard` may alias its own
  // place in `full` (in place).
  virtual CommHandle AllGatherAsync(const void* shard, void* full, size_t total, DType dtype) = 0;
  // Every rank passes `full` (total elements); `shard` receives this rank's ShardRange of their
  // reduction. `shard` may alias its own place in `full`; then the rest of `full` is clobbered.
  virtual CommHandle ReduceScatterAsync(const void* full, void* shard, size_t total, DType dtype,
                                        ReduceOp op) = 0;
  // `root`'s `data` is copied to every rank's `data`.
  virtual CommHandle BroadcastAsync(void* data, size_t count, DType dtype, int root) = 0;
  // Point to point. Messages between two ranks with the same tag arrive in order. The NCCL
  // backend matches by order only and ignores tags.
  virtual CommHandle SendAsync(const void* data, size_t count, DType dtype, int peer, int tag) = 0;
  // Fails if the matching send carried a different number of elements.
  virtual CommHandle RecvAsync(void* data, size_t count, DType dtype, int peer, int tag) = 0;
  virtual CommHandle BarrierAsync() = 0;

  // Sub-communicator of the ranks passing the same `color`, ordered by (key, rank); a negative
  // color joins none and yields nullptr. Collective over this communicator; blocking, but it
  // first meets the others in a barrier bounded by the timeout. Inherits the timeout.
  virtual Result<std::unique_ptr<Comm>> Split(int color, int key) = 0;

  // Waits (bounded by the timeout) for operations stranded by an earlier timeout to complete.
  // OK when there are none left: the communicator accepts work again.
  virtual Status Drain() = 0;

  // Where collectives on host memory go: the communicator itself (MPI), or for a backend that
  // moves device memory only (NCCL) the MPI communicator of the same ranks it was built over.
  virtual Comm& host() { return *this; }
  // The stream a stream-ordered backend enqueues every operation on (NCCL: its cudaStream_t);
  // nullptr where operations complete on the host (MPI).
  virtual void* native_stream() const { return nullptr; }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) {
    return AllReduceAsync(data, count, dtype, op).Wait();
  }
  Status AllGather(const void* shard, void* full, size_t total, DType dtype) {
    return AllGatherAsync(shard, full, total, dtype).Wait();
  }
  Status ReduceScatter(const void* full, void* shard, size_t total, DType dtype, ReduceOp op) {
    return ReduceScatterAsync(full, shard, total, dtype, op).Wait();
  }
  Status Broadcast(void* data, size_t count, DType dtype, int root) {
    return BroadcastAsync(data, count, dtype, root).Wait();
  }
  Status Send(const void* data, size_t count, DType dtype, int peer, int tag) {
    return SendAsync(data, count, dtype, peer, tag).Wait();
  }
  Status Recv(void* data, size_t count, DType dtype, int peer, int tag) {
    return RecvAsync(data, count, dtype, peer, tag).Wait();
  }
  Status Barrier() { return BarrierAsync().Wait(); }

  ShardSpan Shard(size_t total) const { return ShardRange(total, size(), rank()); }
};

namespace internal {
// Shared argument checks of the backends, so both reject the same calls with the same words.
Status CheckCommBuffer(std::string_view op, const void* data, size_t count, DType dtype,
                       size_t max_count);
Status CheckCommPeer(std::string_view op, std::string_view role, int peer, int size);
// A shard buffer may be its own place inside the full buffer (in place) or apart from it, but
// must not overlap it anywhere else.
Status CheckShardPlacement(std::string_view op, const void* shard, const void* full, ShardSpan mine,
                           size_t total, DType dtype);

// How errors name an operation: "all_reduce #17 (f32, 1000 elements, sum) on world",
// "recv of 10 f32 elements from rank 2 (tag 5) on world". `seq` is the collective's number on
// its communicator; `peer` the root of a broadcast or the peer of a send/recv.
struct CommOpInfo {
  CommOpKind kind = CommOpKind::kBarrier;
  uint64_t seq = 0;
  DType dtype = DType::kF32;
  size_t count = 0;
  std::optional<ReduceOp> reduce_op;
  int peer = -1;
  int tag = 0;
};
std::string DescribeCommOp(const CommOpInfo& info, std::string_view comm_name);
}  // namespace internal

}  // namespace sluice

// For backends: returns a finished CommHandle carrying the error of a Status expression.
#define SLUICE_RETURN_HANDLE_IF_ERROR(expr)                                                   \
  do {                                                                                        \
    ::sluice::Status sluice_check_ = (expr);                                                  \
    if (!sluice_check_.ok()) return ::sluice::CommHandle::Finished(std::move(sluice_check_)); \
  } while (0)
