// Creating the world communicator: CreateWorldComm({.backend = CommBackend::kNccl, ...}).
#pragma once

#include <memory>
#include <string_view>

#include "runtime/comm.h"
#include "runtime/status.h"

namespace sluice {

enum class CommBackend : uint8_t { kMpi = 0, kNccl = 1 };
std::string_view CommBackendName(CommBackend backend);  // "mpi", "nccl"
Result<CommBackend> ParseCommBackend(std::string_view name);

struct CommOptions {
  CommBackend backend = CommBackend::kMpi;
  // run.comm_timeout: seconds before an operation fails with DeadlineExceeded.
  double timeout_seconds = 300.0;
  // NCCL: the cudaStream_t every operation is enqueued on; nullptr makes the communicator
  // create (and own) a non-blocking stream.
  void* stream = nullptr;
  // NCCL: the CUDA device ordinal; -1 takes the calling thread's current device.
  int device = -1;
};

// The communicator over every rank of the job. Initialises MPI on first use (also for NCCL,
// whose unique id travels over MPI) with MPI_THREAD_MULTIPLE, sets the log rank, and registers
// MPI_Finalize at exit. Collective: every rank calls it.
Result<std::unique_ptr<Comm>> CreateWorldComm(const CommOptions& options = {});

// An NCCL communicator over the ranks of `mpi` (an MPI communicator, from CreateWorldComm or a
// Split of it: it bootstraps NCCL and stays the host-memory side, Comm::host()), enqueueing every
// operation on `stream` (a cudaStream_t of CUDA device `device`). Collective over `mpi`'s ranks.
// Unavailable in builds without CUDA and NCCL.
Result<std::unique_ptr<Comm>> CreateNcclComm(std::unique_ptr<Comm> mpi, int device, void* stream);

namespace internal {
// Implemented by runtime/comm/nccl/ or, in builds without CUDA, runtime/comm/nccl_unavailable.cpp.
Result<std::unique_ptr<Comm>> CreateNcclWorldComm(const CommOptions& options);
}  // namespace internal

}  // namespace sluice
