// Process-wide MPI state: initialisation with MPI_THREAD_MULTIPLE, finalisation at exit, and the
// mapping of Sluice dtypes and reductions onto MPI datatypes and operations.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/comm.h"
#include "runtime/comm/mpi/mpi_call.h"  // <mpi.h> without the C++ bindings
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::mpi {

// Initialises MPI once per process with MPI_THREAD_MULTIPLE (failing if the library offers
// less) and registers MPI_Finalize at exit. If someone else initialised MPI, only checks the
// thread level and leaves finalisation to them.
Status EnsureMpiInitialized();
// True once MPI_Finalize ran: destructors must not call MPI any more.
bool MpiFinalized();

// The datatype that moves `dtype` (16-bit floats travel as MPI_UINT16_T).
MPI_Datatype MpiTransferType(DType dtype);
// MPI_SUM for f32; for bf16/f16 a user-defined op that adds in f32 and rounds to nearest even
// once per addition (kernels/ref/half.h).
MPI_Op MpiSumOp(DType dtype);
// Finishes ReduceOp::kAvg: divides each element by `world` in f32 and rounds once.
void DivideInPlace(void* data, size_t count, DType dtype, int world);

// Ranks of `comm` translated to MPI_COMM_WORLD ranks.
std::vector<int> WorldRanksOf(MPI_Comm comm, const std::vector<int>& ranks);

}  // namespace sluice::mpi
