#include "runtime/comm/mpi/mpi_comm.h"

#include <fmt/format.h>

#include <climits>

#include "runtime/comm/mpi/mpi_call.h"
#include "runtime/comm/mpi/mpi_operation.h"
#include "runtime/comm/mpi/mpi_runtime.h"
#include "runtime/device_access.h"
#include "runtime/job_abort.h"
#include "runtime/logging.h"

// Evaluates an MPI_I* call that fills operation->request(), then returns a handle for it, or a
// finished handle with the error if posting failed.
#define SLUICE_RETURN_POSTED(operation, call)                                               \
  do {                                                                                      \
    const int sluice_post_rc_ = [&] {                                                       \
      ScopedDeviceAccess sluice_access_; /* MPI may progress other device buffers */        \
      return (call);                                                                        \
    }();                                                                                    \
    if (sluice_post_rc_ != MPI_SUCCESS) {                                                   \
      return CommHandle::Finished(                                                          \
          ::sluice::internal::ForeignCallError("MPI", #call, MpiErrorText(sluice_post_rc_), \
                                               __FILE__, __LINE__)                          \
              .WithContext((operation)->Describe()));                                       \
    }                                                                                       \
    return CommHandle(std::move(operation), timeout_seconds());                             \
  } while (0)

namespace sluice::mpi {
namespace {

constexpr size_t kMaxCount = INT_MAX;

Status CheckTimeout(double seconds) {
  if (!(seconds > 0) || seconds > kMaxCommTimeoutSeconds) {
    return InvalidArgumentError(
        "run.comm_timeout must be a positive number of seconds up to {:g} (about 116 days), got "
        "{}",
        kMaxCommTimeoutSeconds, seconds);
  }
  return OkStatus();
}

// Shard counts and offsets of a flat buffer, as MPI's v-collectives take them.
void FillShardLayout(size_t total, int world, std::vector<int>& counts,
                     std::vector<int>& displacements) {
  counts.resize(static_cast<size_t>(world));
  displacements.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const ShardSpan span = ShardRange(total, world, r);
    counts[static_cast<size_t>(r)] = static_cast<int>(span.count);
    displacements[static_cast<size_t>(r)] = static_cast<int>(span.offset);
  }
}

}  // namespace

// Polls stranded operations to completion (running their finishers); on timeout hands the
// unfinished ones back to the communicator.
class MpiComm::DrainOperation final : public CommOperation {
 public:
  DrainOperation(MpiComm* comm, std::vector<Stranded> stranded)
      : comm_(comm), stranded_(std::move(stranded)) {}
  bool Poll(Status* status) override {
    bool all_done = true;
    for (Stranded& s : stranded_) {
      if (s.operation == nullptr) continue;
      Status result;
      if (!s.operation->Poll(&result)) {
        all_done = false;
        continue;
      }
      if (!result.ok() && first_error_.ok()) first_error_ = std::move(result);
      s.operation.reset();
    }
    if (!all_done) return false;
    *status = first_error_;
    return true;
  }
  Status Expire(double waited_seconds) override {
    size_t left = 0;
    std::string first;
    std::lock_guard lock(comm_->mutex_);
    for (Stranded& s : stranded_) {
      if (s.operation == nullptr) continue;
      if (left++ == 0) first = s.what;
      comm_->stranded_.push_back(std::move(s));
    }
    return DeadlineExceededError(
        "{}: {} operation(s) abandoned after an earlier timeout are still incomplete after "
        "another {:.1f} s; the first: {}",
        comm_->name(), left, waited_seconds, first);
  }

 private:
  MpiComm* comm_;
  std::vector<Stranded> stranded_;
  Status first_error_;
};

MpiComm::MpiComm(MPI_Comm comm, std::string name, double timeout_seconds)
    : comm_(comm), name_(std::move(name)), timeout_seconds_(timeout_seconds) {}

Result<std::unique_ptr<MpiComm>> MpiComm::Adopt(MPI_Comm comm, std::string name,
                                                double timeout_seconds) {
  SLUICE_RETURN_IF_ERROR(CheckTimeout(timeout_seconds));
  std::unique_ptr<MpiComm> result(new MpiComm(comm, std::move(name), timeout_seconds));
  SLUICE_TRY_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  SLUICE_TRY_MPI(MPI_Comm_rank(comm, &result->rank_));
  SLUICE_TRY_MPI(MPI_Comm_size(comm, &result->size_));
  int* tag_ub = nullptr;
  int found = 0;
  SLUICE_TRY_MPI(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &found));
  if (found && tag_ub != nullptr) result->tag_upper_bound_ = *tag_ub;
  result->board_ = ArrivalBoard::Create(comm);
  return result;
}

MpiComm::~MpiComm() {
  if (MpiFinalized()) return;
  if (board_ == nullptr) {  // Adopt() failed half way
    MPI_Comm_free(&comm_);
    return;
  }
  if (JobAbortPending()) {  // waiting for the late ranks again would only delay the abort
    board_->Abandon();
    return;
  }
  Status status = Drain();
  if (status.ok()) status = BarrierOf(CommOpKind::kBarrier).Wait();
  if (!status.ok()) {
    // Freeing the window or communicator could wait forever for ranks that never come.
    SLUICE_LOG(kError, "comm", "{}: leaving the MPI communicator allocated: {}", name_,
               status.ToString());
    board_->Abandon();
    return;
  }
  board_.reset();
  ScopedDeviceAccess access;  // as in Split
  MPI_Comm_free(&comm_);
}

void MpiComm::SetTimeout(double seconds) {
  SLUICE_CHECK(seconds > 0 && seconds <= kMaxCommTimeoutSeconds) << "timeout " << seconds;
  timeout_seconds_.store(seconds);
}

Status MpiComm::CheckUsable(CommOpKind kind) const {
  if (!broken_.load(std::memory_order_acquire)) return OkStatus();
  std::lock_guard lock(mutex_);
  return FailedPreconditionError(
      "{} on {} refused: the communicator is unusable since {}; call Drain() once the late ranks "
      "arrived, or end the run",
      CommOpName(kind), name_, broken_by_);
}

uint64_t MpiComm::Enter(CommOpKind kind) {
  const uint64_t seq = seq_.fetch_add(1) + 1;
  board_->Enter(seq, kind);
  return seq;
}

void MpiComm::Strand(std::unique_ptr<MpiOperation> operation, std::string what) {
  std::lock_guard lock(mutex_);
  if (!broken_.load()) broken_by_ = what;
  stranded_.push_back(Stranded{std::move(operation), std::move(what)});
  broken_.store(true, std::memory_order_release);
}

std::string MpiComm::DescribeLateRanks(uint64_t seq) { return board_->DescribeLate(seq); }

Status MpiComm::Drain() {
  std::vector<Stranded> stranded;
  {
    std::lock_guard lock(mutex_);
    stranded.swap(stranded_);
  }
  if (!stranded.empty()) {
    Status status =
        CommHandle(std::make_unique<DrainOperation>(this, std::move(stranded)), timeout_seconds())
            .Wait();
    if (!status.ok()) return status;
  }
  std::lock_guard lock(mutex_);
  if (stranded_.empty()) {
    broken_.store(false, std::memory_order_release);
    broken_by_.clear();
  }
  return OkStatus();
}

CommHandle MpiComm::AllReduceAsync(void* data, size_t count, DType dtype, ReduceOp op) {
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsable(CommOpKind::kAllReduce));
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("all_reduce", data, count, dtype, kMaxCount));
  auto operation = std::make_unique<MpiOperation>(this, CommOpKind::kAllReduce,
                                                  Enter(CommOpKind::kAllReduce), dtype, count);
  operation->SetReduceOp(op);
  if (op == ReduceOp::kAvg) operation->SetAverageAfter(data, count, size_);
  SLUICE_RETURN_POSTED(
      operation, MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MpiTransferType(dtype),
                                MpiSumOp(dtype), comm_, operation->request()));
}

CommHandle MpiComm::AllGatherAsync(const void* shard, void* full, size_t total, DType dtype) {
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsable(CommOpKind::kAllGather));
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("all_gather", full, total, dtype, kMaxCount));
  const ShardSpan mine = Shard(total);
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("all_gather", shard, mine.count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckShardPlacement("all_gather", shard, full, mine, total, dtype));
  const void* own_place = static_cast<const char*>(full) + mine.offset * DTypeSize(dtype);
  const bool in_place = shard == own_place;
  const void* send = in_place ? MPI_IN_PLACE : shard;
  const MPI_Datatype type = MpiTransferType(dtype);
  auto operation = std::make_unique<MpiOperation>(this, CommOpKind::kAllGather,
                                                  Enter(CommOpKind::kAllGather), dtype, total);
  if (total % static_cast<size_t>(size_) == 0) {
    const int per_rank = static_cast<int>(total / static_cast<size_t>(size_));
    SLUICE_RETURN_POSTED(operation, MPI_Iallgather(send, per_rank, type, full, per_rank, type,
                                                   comm_, operation->request()));
  }
  FillShardLayout(total, size_, operation->counts(), operation->displacements());
  SLUICE_RETURN_POSTED(
      operation,
      MPI_Iallgatherv(send, static_cast<int>(mine.count), type, full, operation->counts().data(),
                      operation->displacements().data(), type, comm_, operation->request()));
}

CommHandle MpiComm::ReduceScatterAsync(const void* full, void* shard, size_t total, DType dtype,
                                       ReduceOp op) {
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsable(CommOpKind::kReduceScatter));
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("reduce_scatter", full, total, dtype, kMaxCount));
  const ShardSpan mine = Shard(total);
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("reduce_scatter", shard, mine.count, dtype, kMaxCount));
  const size_t element = DTypeSize(dtype);
  void* own_place = static_cast<char*>(const_cast<void*>(full)) + mine.offset * element;
  const bool in_place = shard == own_place && mine.count > 0;
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckShardPlacement("reduce_scatter", shard, full, mine, total, dtype));
  auto operation = std::make_unique<MpiOperation>(this, CommOpKind::kReduceScatter,
                                                  Enter(CommOpKind::kReduceScatter), dtype, total);
  operation->SetReduceOp(op);
  // In place, MPI leaves this rank's result at the start of the buffer.
  const void* send = in_place ? MPI_IN_PLACE : full;
  void* receive = in_place ? const_cast<void*>(full) : shard;
  if (in_place && mine.offset > 0) operation->SetMoveAfter(full, shard, mine.count * element);
  if (op == ReduceOp::kAvg) operation->SetAverageAfter(shard, mine.count, size_);
  const MPI_Datatype type = MpiTransferType(dtype);
  if (total % static_cast<size_t>(size_) == 0) {
    SLUICE_RETURN_POSTED(
        operation, MPI_Ireduce_scatter_block(send, receive, static_cast<int>(mine.count), type,
                                             MpiSumOp(dtype), comm_, operation->request()));
  }
  FillShardLayout(total, size_, operation->counts(), operation->displacements());
  SLUICE_RETURN_POSTED(operation,
                       MPI_Ireduce_scatter(send, receive, operation->counts().data(), type,
                                           MpiSumOp(dtype), comm_, operation->request()));
}

CommHandle MpiComm::BroadcastAsync(void* data, size_t count, DType dtype, int root) {
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsable(CommOpKind::kBroadcast));
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("broadcast", data, count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommPeer("broadcast", "root", root, size_));
  auto operation = std::make_unique<MpiOperation>(this, CommOpKind::kBroadcast,
                                                  Enter(CommOpKind::kBroadcast), dtype, count);
  operation->SetPeer(root, 0);
  SLUICE_RETURN_POSTED(operation, MPI_Ibcast(data, static_cast<int>(count), MpiTransferType(dtype),
                                             root, comm_, operation->request()));
}

CommHandle MpiComm::SendAsync(const void* data, size_t count, DType dtype, int peer, int tag) {
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsable(CommOpKind::kSend));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommBuffer("send", data, count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommPeer("send", "peer", peer, size_));
  if (tag < 0 || tag > tag_upper_bound_) {
    return CommHandle::Finished(
        InvalidArgumentError("send: tag {} outside [0, {}]", tag, tag_upper_bound_));
  }
  auto operation = std::make_unique<MpiOperation>(this, CommOpKind::kSend, 0, dtype, count);
  operation->SetPeer(peer, tag);
  SLUICE_RETURN_POSTED(operation, MPI_Isend(data, static_cast<int>(count), MpiTransferType(dtype),
                                            peer, tag, comm_, operation->request()));
}

CommHandle MpiComm::RecvAsync(void* data, size_t count, DType dtype, int peer, int tag) {
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsable(CommOpKind::kRecv));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommBuffer("recv", data, count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommPeer("recv", "peer", peer, size_));
  if (tag < 0 || tag > tag_upper_bound_) {
    return CommHandle::Finished(
        InvalidArgumentError("recv: tag {} outside [0, {}]", tag, tag_upper_bound_));
  }
  auto operation = std::make_unique<MpiOperation>(this, CommOpKind::kRecv, 0, dtype, count);
  operation->SetPeer(peer, tag);
  SLUICE_RETURN_POSTED(operation, MPI_Irecv(data, static_cast<int>(count), MpiTransferType(dtype),
                                            peer, tag, comm_, operation->request()));
}

CommHandle MpiComm::BarrierOf(CommOpKind kind) {
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsable(kind));
  auto operation = std::make_unique<MpiOperation>(this, kind, Enter(kind), DType::kF32, 0);
  SLUICE_RETURN_POSTED(operation, MPI_Ibarrier(comm_, operation->request()));
}

CommHandle MpiComm::BarrierAsync() { return BarrierOf(CommOpKind::kBarrier); }

Result<std::unique_ptr<Comm>> MpiComm::Split(int color, int key) {
  // MPI_Comm_split cannot time out, so the ranks first meet in a barrier that can.
  SLUICE_RETURN_IF_ERROR(BarrierOf(CommOpKind::kSplit).Wait());
  MPI_Comm sub = MPI_COMM_NULL;
  {
    // A blocking collective progresses every pending request, some into device memory.
    ScopedDeviceAccess access;
    SLUICE_TRY_MPI(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub));
  }
  if (sub == MPI_COMM_NULL) return std::unique_ptr<Comm>();
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<MpiComm> child,
                          Adopt(sub, fmt::format("{}/split({})", name_, color), timeout_seconds()));
  return std::unique_ptr<Comm>(std::move(child));
}

Result<std::unique_ptr<MpiComm>> CreateMpiWorld(double timeout_seconds) {
  SLUICE_RETURN_IF_ERROR(CheckTimeout(timeout_seconds));
  SLUICE_RETURN_IF_ERROR(EnsureMpiInitialized());
  MPI_Comm world = MPI_COMM_NULL;
  SLUICE_TRY_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<MpiComm> comm,
                          MpiComm::Adopt(world, "world", timeout_seconds));
  SetLogRank(comm->rank(), comm->size());
  return comm;
}

}  // namespace sluice::mpi
