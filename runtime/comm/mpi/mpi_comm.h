// MpiComm: the Comm backend over MPI for host buffers (see runtime/comm.h for the contract).
//
// Collectives are MPI nonblocking collectives (MPI_Iallreduce, MPI_Iallgather(v),
// MPI_Ireduce_scatter(_block), MPI_Ibcast, MPI_Ibarrier) and MPI_Isend/MPI_Irecv; bf16 and f16
// reduce with user-defined MPI ops. Each collective first records its arrival on the
// communicator's ArrivalBoard so that a timeout can name the ranks that did not arrive.
//
// Destroying an MpiComm is collective (it drains, meets the others in a timed barrier, and frees
// the arrival board's window and communicators): destroy communicators in the same order on every
// rank. If the barrier or the drain times out, the MPI communicator and the board are left
// allocated rather than risk a hang.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/comm/mpi/arrival_board.h"
#include "runtime/comm/mpi/mpi_call.h"  // <mpi.h> without the C++ bindings

namespace sluice::mpi {

class MpiOperation;

class MpiComm final : public Comm {
 public:
  // Takes ownership of `comm` (freed by the destructor) and sets MPI_ERRORS_RETURN on it.
  // Collective over `comm`.
  static Result<std::unique_ptr<MpiComm>> Adopt(MPI_Comm comm, std::string name,
                                                double timeout_seconds);
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend_name() const override { return "mpi"; }
  const std::string& name() const override { return name_; }
  double timeout_seconds() const override { return timeout_seconds_.load(); }
  void SetTimeout(double seconds) override;

  CommHandle AllReduceAsync(void* data, size_t count, DType dtype, ReduceOp op) override;
  CommHandle AllGatherAsync(const void* shard, void* full, size_t total, DType dtype) override;
  CommHandle ReduceScatterAsync(const void* full, void* shard, size_t total, DType dtype,
                                ReduceOp op) override;
  CommHandle BroadcastAsync(void* data, size_t count, DType dtype, int root) override;
  CommHandle SendAsync(const void* data, size_t count, DType dtype, int peer, int tag) override;
  CommHandle RecvAsync(void* data, size_t count, DType dtype, int peer, int tag) override;
  CommHandle BarrierAsync() override;
  Result<std::unique_ptr<Comm>> Split(int color, int key) override;
  Status Drain() override;

  MPI_Comm native() const { return comm_; }

  // For MpiOperation: "ranks 3 did not arrive; rank 3 last entered barrier #16".
  std::string DescribeLateRanks(uint64_t seq);
  // For MpiOperation: keeps an operation that timed out; the communicator refuses work until
  // Drain() sees it complete.
  void Strand(std::unique_ptr<MpiOperation> operation, std::string what);

 private:
  struct Stranded {
    std::unique_ptr<MpiOperation> operation;
    std::string what;
  };
  class DrainOperation;

  MpiComm(MPI_Comm comm, std::string name, double timeout_seconds);
  Status CheckUsable(CommOpKind kind) const;
  uint64_t Enter(CommOpKind kind);
  CommHandle BarrierOf(CommOpKind kind);

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  int tag_upper_bound_ = 32767;
  std::atomic<double> timeout_seconds_;
  std::atomic<uint64_t> seq_{0};
  std::unique_ptr<ArrivalBoard> board_;

  mutable std::mutex mutex_;
  std::atomic<bool> broken_{false};
  std::string broken_by_;  // the first timeout's message
  std::vector<Stranded> stranded_;
};

// The world communicator (a duplicate of MPI_COMM_WORLD, named "world"); initialises MPI.
Result<std::unique_ptr<MpiComm>> CreateMpiWorld(double timeout_seconds);

}  // namespace sluice::mpi
