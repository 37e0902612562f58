#include "runtime/comm/mpi/mpi_operation.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "runtime/comm/mpi/mpi_call.h"
#include "runtime/comm/mpi/mpi_comm.h"
#include "runtime/comm/mpi/mpi_runtime.h"
#include "runtime/device_access.h"

namespace sluice::mpi {

MpiOperation::MpiOperation(MpiComm* comm, CommOpKind kind, uint64_t seq, DType dtype, size_t count)
    : comm_(comm) {
  info_.kind = kind;
  info_.seq = seq;
  info_.dtype = dtype;
  info_.count = count;
}

MpiOperation::MpiOperation(MpiOperation&& other) noexcept
    : comm_(other.comm_),
      info_(other.info_),
      request_(other.request_),
      counts_(std::move(other.counts_)),
      displacements_(std::move(other.displacements_)),
      move_from_(other.move_from_),
      move_to_(other.move_to_),
      move_bytes_(other.move_bytes_),
      average_data_(other.average_data_),
      average_count_(other.average_count_),
      average_world_(other.average_world_) {
  other.request_ = MPI_REQUEST_NULL;
}

void MpiOperation::SetMoveAfter(const void* from, void* to, size_t bytes) {
  move_from_ = from;
  move_to_ = to;
  move_bytes_ = bytes;
}

void MpiOperation::SetAverageAfter(void* data, size_t count, int world) {
  average_data_ = data;
  average_count_ = count;
  average_world_ = world;
}

void MpiOperation::SetPeer(int peer, int tag) {
  info_.peer = peer;
  info_.tag = tag;
}

std::string MpiOperation::Describe() const {
  return internal::DescribeCommOp(info_, comm_->name());
}

Status MpiOperation::Completed(const MPI_Status& mpi_status) {
  if (info_.kind == CommOpKind::kRecv) {
    int received = 0;
    SLUICE_TRY_MPI(MPI_Get_count(&mpi_status, MpiTransferType(info_.dtype), &received));
    if (static_cast<size_t>(received) != info_.count) {
      return InvalidArgumentError("{}: the matching send carried {} elements, not {}", Describe(),
                                  received, info_.count);
    }
  }
  if (move_bytes_ > 0) std::memmove(move_to_, move_from_, move_bytes_);
  if (average_data_ != nullptr) {
    DivideInPlace(average_data_, average_count_, info_.dtype, average_world_);
  }
  return OkStatus();
}

bool MpiOperation::Poll(Status* status) {
  int done = 0;
  MPI_Status mpi_status;
  // MPI_Test progresses every pending request, whose buffers may be device memory
  // (runtime/device_access.h); so may Completed's unpacking.
  ScopedDeviceAccess access;
  const int rc = MPI_Test(&request_, &done, &mpi_status);
  if (rc != MPI_SUCCESS) {
    *status = internal::ForeignCallError("MPI", "MPI_Test", MpiErrorText(rc), __FILE__, __LINE__)
                  .WithContext(Describe());
    return true;
  }
  if (!done) return false;
  *status = Completed(mpi_status);
  return true;
}

Status MpiOperation::Expire(double waited_seconds) {
  ScopedDeviceAccess access;  // as in Poll
  const std::string what = Describe();
  if (info_.kind == CommOpKind::kRecv) {
    // An unmatched receive can be cancelled; the communicator stays usable.
    MPI_Status mpi_status;
    if (MPI_Cancel(&request_) == MPI_SUCCESS && MPI_Wait(&request_, &mpi_status) == MPI_SUCCESS) {
      int cancelled = 0;
      MPI_Test_cancelled(&mpi_status, &cancelled);
      if (!cancelled) return Completed(mpi_status);  // matched while we gave up: it is done
      return DeadlineExceededError(
          "{} timed out after {:.1f} s: rank {} did not send it; check the peer's tag and "
          "count, or raise run.comm_timeout",
          what, waited_seconds, info_.peer);
    }
  }
  std::string late = info_.kind == CommOpKind::kSend || info_.kind == CommOpKind::kRecv
                         ? fmt::format("rank {} did not {} it", info_.peer,
                                       info_.kind == CommOpKind::kSend ? "receive" : "send")
                         : comm_->DescribeLateRanks(info_.seq);
  std::string message = fmt::format("{} timed out after {:.1f} s: {}", what, waited_seconds, late);
  comm_->Strand(std::make_unique<MpiOperation>(std::move(*this)), message);
  return DeadlineExceededError(
      "{}; check that every rank issues the same operations in the same order, or raise "
      "run.comm_timeout",
      message);
}

}  // namespace sluice::mpi
