// NcclComm: the Comm backend over NCCL for device buffers (see runtime/comm.h for the contract).
//
// Every operation is enqueued on the communicator's CUDA stream and its handle is backed by a
// cudaEvent recorded after it (CommHandle::native_event() gives it, so other streams can wait on
// it without a host sync). bf16 and f16 reduce natively; averages use ncclAvg. Shards of
// unequal size gather as grouped broadcasts and reduce-scatter as grouped reduces.
//
// The NCCL communicator is bootstrapped over an MPI communicator of the same ranks: rank 0's
// ncclUniqueId is broadcast over it, Split() splits it, and it carries the ArrivalBoard that
// names late ranks. A timeout, or an asynchronous NCCL error, aborts the NCCL communicator
// (ncclCommAbort): it refuses work from then on, and Drain() reports why.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/comm.h"
#include "runtime/comm/mpi/arrival_board.h"
#include "runtime/comm/mpi/mpi_comm.h"

namespace sluice::nccl {

class NcclComm final : public Comm {
 public:
  // Collective over `host`. `stream`: the cudaStream_t to enqueue on, or nullptr to create and
  // own a non-blocking one.
  static Result<std::unique_ptr<NcclComm>> Create(std::unique_ptr<mpi::MpiComm> host, int device,
                                                  void* stream, std::string name);
  ~NcclComm() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string_view backend_name() const override { return "nccl"; }
  const std::string& name() const override { return name_; }
  double timeout_seconds() const override { return host_->timeout_seconds(); }
  void SetTimeout(double seconds) override { host_->SetTimeout(seconds); }

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

  Comm& host() override { return *host_; }
  void* native_stream() const override { return stream_; }
  int device() const { return device_; }

  // For NcclOperation.
  std::string DescribeLateRanks(uint64_t seq) { return board_->DescribeLate(seq); }
  // Aborts the NCCL communicator once; `why` is reported by every later call.
  void Abort(const std::string& why);
  // OK, or the communicator's asynchronous error (which aborts it), or FailedPrecondition if
  // it was aborted.
  Status CheckAsyncError();

 private:
  NcclComm(std::unique_ptr<mpi::MpiComm> host, int device, std::string name);
  Status CheckUsableLocked(CommOpKind kind) const;  // mutex_ held
  template <typename Enqueue>
  CommHandle Launch(internal::CommOpInfo info, Enqueue&& enqueue);

  std::unique_ptr<mpi::MpiComm> host_;
  std::unique_ptr<mpi::ArrivalBoard> board_;
  std::string name_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  float* scratch_ = nullptr;  // one device float for Barrier
  std::atomic<uint64_t> seq_{0};

  mutable std::mutex mutex_;
  std::atomic<bool> aborted_{false};
  std::string aborted_by_;
};

}  // namespace sluice::nccl
