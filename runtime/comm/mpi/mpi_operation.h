// MpiOperation: one posted MPI request seen through CommOperation (runtime/comm.h): polls it
// with MPI_Test, finishes averages and in-place moves on completion, and on timeout cancels a
// receive or strands anything else with its communicator, which polls it to completion in
// Comm::Drain() (so a late completion still leaves correct results in the buffers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/comm/mpi/mpi_call.h"  // <mpi.h> without the C++ bindings

namespace sluice::mpi {

class MpiComm;

class MpiOperation final : public CommOperation {
 public:
  // seq: the collective's number on the communicator (0 for point to point).
  MpiOperation(MpiComm* comm, CommOpKind kind, uint64_t seq, DType dtype, size_t count);
  // Moving keeps the request and the count arrays' storage, which MPI still reads.
  MpiOperation(MpiOperation&& other) noexcept;
  MpiOperation& operator=(MpiOperation&&) = delete;

  // Runs after a successful completion: memmove(move_to, move_from, bytes), then divides
  // `count` elements at `data` by the world size (ReduceOp::kAvg).
  void SetMoveAfter(const void* from, void* to, size_t bytes);
  void SetAverageAfter(void* data, size_t count, int world);
  void SetPeer(int peer, int tag);
  void SetReduceOp(ReduceOp op) { info_.reduce_op = op; }

  MPI_Request* request() { return &request_; }
  std::vector<int>& counts() { return counts_; }
  std::vector<int>& displacements() { return displacements_; }

  // "all_reduce #17 (f32, 1000 elements, sum) on world", "recv of 10 f32 from rank 2 (tag 5)..."
  std::string Describe() const;

  bool Poll(Status* status) override;
  Status Expire(double waited_seconds) override;

 private:
  Status Completed(const MPI_Status& mpi_status);

  MpiComm* comm_;
  internal::CommOpInfo info_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  // Nonblocking v-collectives read these until completion.
  std::vector<int> counts_;
  std::vector<int> displacements_;
  const void* move_from_ = nullptr;
  void* move_to_ = nullptr;
  size_t move_bytes_ = 0;
  void* average_data_ = nullptr;
  size_t average_count_ = 0;
  int average_world_ = 1;
};

}  // namespace sluice::mpi
