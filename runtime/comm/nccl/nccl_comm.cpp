#include "runtime/comm/nccl/nccl_comm.h"

#include <fmt/format.h>

#include <limits>
#include <optional>

#include "runtime/comm/comm_factory.h"
#include "runtime/comm/nccl/nccl_call.h"
#include "runtime/logging.h"

namespace sluice::nccl {
namespace {

constexpr size_t kMaxCount = std::numeric_limits<size_t>::max() / 8;

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kF64:
      return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kAvg ? ncclAvg : ncclSum; }

internal::CommOpInfo OpInfo(CommOpKind kind, DType dtype = DType::kF32, size_t count = 0,
                            std::optional<ReduceOp> op = std::nullopt, int peer = -1, int tag = 0) {
  internal::CommOpInfo info;
  info.kind = kind;
  info.dtype = dtype;
  info.count = count;
  info.reduce_op = op;
  info.peer = peer;
  info.tag = tag;
  return info;
}

bool IsCollective(CommOpKind kind) {
  return kind != CommOpKind::kSend && kind != CommOpKind::kRecv;
}

// Makes `device` current for the calling thread and restores the previous one afterwards.
class DeviceGuard {
 public:
  Status Enter(int device) {
    SLUICE_COMM_TRY_CUDA(cudaGetDevice(&previous_));
    if (previous_ != device) SLUICE_COMM_TRY_CUDA(cudaSetDevice(device));
    device_ = device;
    return OkStatus();
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  int device_ = -1;
};

class NcclOperation final : public CommOperation {
 public:
  NcclOperation(NcclComm* comm, internal::CommOpInfo info, cudaEvent_t event)
      : comm_(comm), info_(info), event_(event) {}
  ~NcclOperation() override { cudaEventDestroy(event_); }

  bool Poll(Status* status) override {
    const cudaError_t query = cudaEventQuery(event_);
    if (query == cudaSuccess) {
      *status = OkStatus();
      return true;
    }
    if (query != cudaErrorNotReady) {
      *status = internal::ForeignCallError("CUDA", "cudaEventQuery", CudaErrorText(query), __FILE__,
                                           __LINE__)
                    .WithContext(Describe());
      return true;
    }
    Status async = comm_->CheckAsyncError();
    if (!async.ok()) {
      *status = std::move(async).WithContext(Describe());
      return true;
    }
    return false;
  }

  Status Expire(double waited_seconds) override {
    const std::string late =
        IsCollective(info_.kind)
            ? comm_->DescribeLateRanks(info_.seq)
            : fmt::format("rank {} did not {} it", info_.peer,
                          info_.kind == CommOpKind::kSend ? "receive" : "send");
    const std::string message =
        fmt::format("{} timed out after {:.1f} s: {}", Describe(), waited_seconds, late);
    comm_->Abort(message);
    return DeadlineExceededError(
        "{}; the NCCL communicator was aborted. Check that every rank issues the same operations "
        "in the same order, or raise run.comm_timeout",
        message);
  }

  void* native_event() const override { return event_; }

 private:
  std::string Describe() const { return internal::DescribeCommOp(info_, comm_->name()); }

  NcclComm* comm_;
  internal::CommOpInfo info_;
  cudaEvent_t event_;
};

}  // namespace

NcclComm::NcclComm(std::unique_ptr<mpi::MpiComm> host, int device, std::string name)
    : host_(std::move(host)), name_(std::move(name)), device_(device) {}

Result<std::unique_ptr<NcclComm>> NcclComm::Create(std::unique_ptr<mpi::MpiComm> host, int device,
                                                   void* stream, std::string name) {
  std::unique_ptr<NcclComm> comm(new NcclComm(std::move(host), device, std::move(name)));
  DeviceGuard guard;
  SLUICE_RETURN_IF_ERROR(guard.Enter(device));
  ncclUniqueId id{};
  if (comm->host_->rank() == 0) SLUICE_TRY_NCCL(ncclGetUniqueId(&id));
  static_assert(sizeof(id) % 2 == 0);
  SLUICE_RETURN_IF_ERROR(comm->host_->Broadcast(&id, sizeof(id) / 2, DType::kBF16, 0)
                             .WithContext("sharing the NCCL unique id"));
  SLUICE_TRY_NCCL(ncclCommInitRank(&comm->comm_, comm->host_->size(), id, comm->host_->rank()));
  if (stream != nullptr) {
    comm->stream_ = static_cast<cudaStream_t>(stream);
  } else {
    SLUICE_COMM_TRY_CUDA(cudaStreamCreateWithFlags(&comm->stream_, cudaStreamNonBlocking));
    comm->owns_stream_ = true;
  }
  SLUICE_COMM_TRY_CUDA(cudaMalloc(&comm->scratch_, sizeof(float)));
  SLUICE_COMM_TRY_CUDA(cudaMemset(comm->scratch_, 0, sizeof(float)));
  comm->board_ = mpi::ArrivalBoard::Create(comm->host_->native());
  return comm;
}

NcclComm::~NcclComm() {
  DeviceGuard guard;
  Status status = guard.Enter(device_);
  if (comm_ != nullptr && !aborted_.load()) {
    // Finalising waits for the peers; meet them in a barrier that can time out first.
    if (status.ok()) status = host_->Barrier();
    if (status.ok() && ncclCommFinalize(comm_) == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      SLUICE_LOG(kError, "comm", "{}: aborting the NCCL communicator: {}", name_,
                 status.ok() ? "ncclCommFinalize failed" : status.ToString());
      ncclCommAbort(comm_);
    }
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (owns_stream_) cudaStreamDestroy(stream_);
}

void NcclComm::Abort(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (aborted_.load()) return;
  SLUICE_LOG(kError, "comm", "{}: aborting the NCCL communicator: {}", name_, why);
  ncclCommAbort(comm_);
  aborted_by_ = why;
  aborted_.store(true, std::memory_order_release);
}

Status NcclComm::CheckAsyncError() {
  ncclResult_t async = ncclSuccess;
  {
    std::lock_guard lock(mutex_);
    if (aborted_.load()) {
      return FailedPreconditionError("{} was aborted after: {}", name_, aborted_by_);
    }
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
    if (rc != ncclSuccess) async = rc;
  }
  if (async == ncclSuccess || async == ncclInProgress) return OkStatus();
  const std::string text =
      fmt::format("{}: asynchronous NCCL error: {}", name_, NcclErrorText(async));
  Abort(text);
  return IoError("{}", text);
}

Status NcclComm::CheckUsableLocked(CommOpKind kind) const {
  if (!aborted_.load(std::memory_order_acquire)) return OkStatus();
  return FailedPreconditionError(
      "{} on {} refused: the NCCL communicator was aborted after: {}; create a new one",
      CommOpName(kind), name_, aborted_by_);
}

template <typename Enqueue>
CommHandle NcclComm::Launch(internal::CommOpInfo info, Enqueue&& enqueue) {
  // Held while enqueueing, so that an abort from another thread cannot free the communicator
  // under an enqueue.
  std::lock_guard lock(mutex_);
  SLUICE_RETURN_HANDLE_IF_ERROR(CheckUsableLocked(info.kind));
  DeviceGuard guard;
  SLUICE_RETURN_HANDLE_IF_ERROR(guard.Enter(device_));
  if (IsCollective(info.kind)) {
    info.seq = seq_.fetch_add(1) + 1;
    board_->Enter(info.seq, info.kind);
  }
  Status status = enqueue();
  cudaEvent_t event = nullptr;
  if (status.ok()) {
    status = [&]() -> Status {
      SLUICE_COMM_TRY_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      SLUICE_COMM_TRY_CUDA(cudaEventRecord(event, stream_));
      return OkStatus();
    }();
  }
  if (!status.ok()) {
    if (event != nullptr) cudaEventDestroy(event);
    return CommHandle::Finished(
        std::move(status).WithContext(internal::DescribeCommOp(info, name_)));
  }
  return CommHandle(std::make_unique<NcclOperation>(this, info, event), timeout_seconds());
}

CommHandle NcclComm::AllReduceAsync(void* data, size_t count, DType dtype, ReduceOp op) {
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("all_reduce", data, count, dtype, kMaxCount));
  const internal::CommOpInfo info = OpInfo(CommOpKind::kAllReduce, dtype, count, op);
  return Launch(info, [&]() -> Status {
    SLUICE_TRY_NCCL(ncclAllReduce(data, data, count, NcclType(dtype), NcclOp(op), comm_, stream_));
    return OkStatus();
  });
}

CommHandle NcclComm::AllGatherAsync(const void* shard, void* full, size_t total, DType dtype) {
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("all_gather", full, total, dtype, kMaxCount));
  const ShardSpan mine = Shard(total);
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("all_gather", shard, mine.count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckShardPlacement("all_gather", shard, full, mine, total, dtype));
  const internal::CommOpInfo info = OpInfo(CommOpKind::kAllGather, dtype, total);
  const int world = size();
  const size_t element = DTypeSize(dtype);
  return Launch(info, [&]() -> Status {
    if (total % static_cast<size_t>(world) == 0) {
      // In place when shard == full + rank * count, which NCCL detects itself.
      SLUICE_TRY_NCCL(ncclAllGather(shard, full, mine.count, NcclType(dtype), comm_, stream_));
      return OkStatus();
    }
    SLUICE_TRY_NCCL(ncclGroupStart());
    for (int r = 0; r < world; ++r) {
      const ShardSpan span = ShardRange(total, world, r);
      if (span.count == 0) continue;
      void* place = static_cast<char*>(full) + span.offset * element;
      const ncclResult_t rc = ncclBroadcast(r == rank() ? shard : place, place, span.count,
                                            NcclType(dtype), r, comm_, stream_);
      if (rc != ncclSuccess) {
        ncclGroupEnd();
        SLUICE_TRY_NCCL(rc);
      }
    }
    SLUICE_TRY_NCCL(ncclGroupEnd());
    return OkStatus();
  });
}

CommHandle NcclComm::ReduceScatterAsync(const void* full, void* shard, size_t total, DType dtype,
                                        ReduceOp op) {
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("reduce_scatter", full, total, dtype, kMaxCount));
  const ShardSpan mine = Shard(total);
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("reduce_scatter", shard, mine.count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckShardPlacement("reduce_scatter", shard, full, mine, total, dtype));
  const internal::CommOpInfo info = OpInfo(CommOpKind::kReduceScatter, dtype, total, op);
  const int world = size();
  const size_t element = DTypeSize(dtype);
  return Launch(info, [&]() -> Status {
    if (total % static_cast<size_t>(world) == 0) {
      SLUICE_TRY_NCCL(
          ncclReduceScatter(full, shard, mine.count, NcclType(dtype), NcclOp(op), comm_, stream_));
      return OkStatus();
    }
    SLUICE_TRY_NCCL(ncclGroupStart());
    for (int r = 0; r < world; ++r) {
      const ShardSpan span = ShardRange(total, world, r);
      if (span.count == 0) continue;
      const void* part = static_cast<const char*>(full) + span.offset * element;
      // Only the root's receive buffer is written.
      void* receive = r == rank() ? shard : const_cast<void*>(part);
      const ncclResult_t rc =
          ncclReduce(part, receive, span.count, NcclType(dtype), NcclOp(op), r, comm_, stream_);
      if (rc != ncclSuccess) {
        ncclGroupEnd();
        SLUICE_TRY_NCCL(rc);
      }
    }
    SLUICE_TRY_NCCL(ncclGroupEnd());
    return OkStatus();
  });
}

CommHandle NcclComm::BroadcastAsync(void* data, size_t count, DType dtype, int root) {
  SLUICE_RETURN_HANDLE_IF_ERROR(
      internal::CheckCommBuffer("broadcast", data, count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommPeer("broadcast", "root", root, size()));
  const internal::CommOpInfo info =
      OpInfo(CommOpKind::kBroadcast, dtype, count, std::nullopt, root);
  return Launch(info, [&]() -> Status {
    SLUICE_TRY_NCCL(ncclBroadcast(data, data, count, NcclType(dtype), root, comm_, stream_));
    return OkStatus();
  });
}

CommHandle NcclComm::SendAsync(const void* data, size_t count, DType dtype, int peer, int tag) {
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommBuffer("send", data, count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommPeer("send", "peer", peer, size()));
  const internal::CommOpInfo info =
      OpInfo(CommOpKind::kSend, dtype, count, std::nullopt, peer, tag);
  return Launch(info, [&]() -> Status {
    SLUICE_TRY_NCCL(ncclSend(data, count, NcclType(dtype), peer, comm_, stream_));
    return OkStatus();
  });
}

CommHandle NcclComm::RecvAsync(void* data, size_t count, DType dtype, int peer, int tag) {
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommBuffer("recv", data, count, dtype, kMaxCount));
  SLUICE_RETURN_HANDLE_IF_ERROR(internal::CheckCommPeer("recv", "peer", peer, size()));
  const internal::CommOpInfo info =
      OpInfo(CommOpKind::kRecv, dtype, count, std::nullopt, peer, tag);
  return Launch(info, [&]() -> Status {
    SLUICE_TRY_NCCL(ncclRecv(data, count, NcclType(dtype), peer, comm_, stream_));
    return OkStatus();
  });
}

CommHandle NcclComm::BarrierAsync() {
  const internal::CommOpInfo info = OpInfo(CommOpKind::kBarrier);
  return Launch(info, [&]() -> Status {
    SLUICE_TRY_NCCL(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
    return OkStatus();
  });
}

Result<std::unique_ptr<Comm>> NcclComm::Split(int color, int key) {
  {
    std::lock_guard lock(mutex_);
    SLUICE_RETURN_IF_ERROR(CheckUsableLocked(CommOpKind::kSplit));
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Comm> sub_host, host_->Split(color, key));
  if (sub_host == nullptr) return std::unique_ptr<Comm>();
  std::unique_ptr<mpi::MpiComm> host(static_cast<mpi::MpiComm*>(sub_host.release()));
  // A stream the parent owns dies with it, so the child makes its own.
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> child,
                          Create(std::move(host), device_, owns_stream_ ? nullptr : stream_,
                                 fmt::format("{}/split({})", name_, color)));
  return std::unique_ptr<Comm>(std::move(child));
}

Status NcclComm::Drain() {
  if (!aborted_.load()) return OkStatus();
  std::lock_guard lock(mutex_);
  return FailedPreconditionError(
      "{} cannot recover: the NCCL communicator was aborted after: {}; create a new one", name_,
      aborted_by_);
}

}  // namespace sluice::nccl

namespace sluice::internal {

Result<std::unique_ptr<Comm>> CreateNcclWorldComm(const CommOptions& options) {
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    return UnavailableError(
        "the NCCL backend needs a CUDA device on every rank, and this process sees none ({}); "
        "use the MPI backend here",
        error != cudaSuccess ? nccl::CudaErrorText(error) : "0 devices");
  }
  int device = options.device;
  if (device < 0) SLUICE_COMM_TRY_CUDA(cudaGetDevice(&device));
  if (device >= devices) {
    return InvalidArgumentError("CUDA device {} requested, but only {} are visible", device,
                                devices);
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<mpi::MpiComm> host,
                          mpi::CreateMpiWorld(options.timeout_seconds));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<nccl::NcclComm> world,
                          nccl::NcclComm::Create(std::move(host), device, options.stream, "world"));
  return std::unique_ptr<Comm>(std::move(world));
}

}  // namespace sluice::internal

namespace sluice {

Result<std::unique_ptr<Comm>> CreateNcclComm(std::unique_ptr<Comm> mpi, int device, void* stream) {
  auto* host = dynamic_cast<mpi::MpiComm*>(mpi.get());
  if (host == nullptr) {
    return InvalidArgumentError("an NCCL communicator is built over an MPI one; {} is {}",
                                mpi->name(), mpi->backend_name());
  }
  (void)mpi.release();
  std::string name = host->name() + "/nccl";
  SLUICE_ASSIGN_OR_RETURN(
      std::unique_ptr<nccl::NcclComm> comm,
      nccl::NcclComm::Create(std::unique_ptr<mpi::MpiComm>(host), device, stream, std::move(name)));
  return std::unique_ptr<Comm>(std::move(comm));
}

}  // namespace sluice
