#include "runtime/comm/mpi/mpi_runtime.h"

#include <cstdlib>
#include <mutex>

#include "kernels/ref/half.h"
#include "runtime/comm/mpi/arrival_board.h"
#include "runtime/comm/mpi/mpi_call.h"
#include "runtime/job_abort.h"

namespace sluice::mpi {
namespace {

struct MpiState {
  std::mutex mutex;
  bool attempted = false;
  Status init_status;
  bool owns_finalize = false;
  MPI_Op bf16_sum = MPI_OP_NULL;
  MPI_Op f16_sum = MPI_OP_NULL;
};

MpiState& State() {
  static MpiState* state = new MpiState();  // never destroyed: used from the atexit hook
  return *state;
}

template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float)>
void HalfSum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FromF32(ToF32(a[i]) + ToF32(b[i]));
}

void FinalizeAtExit() {
  MpiState& state = State();
  std::lock_guard lock(state.mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  ArrivalBoard::PrepareForFinalize();
  if (state.bf16_sum != MPI_OP_NULL) MPI_Op_free(&state.bf16_sum);
  if (state.f16_sum != MPI_OP_NULL) MPI_Op_free(&state.f16_sum);
  if (state.owns_finalize) MPI_Finalize();
}

// mpirun then ends every rank of the job, a stopped one included, and exits non-zero.
void AbortWorld(int exit_code) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

Status InitializeLocked(MpiState& state) {
  int initialized = 0;
  SLUICE_TRY_MPI(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    SLUICE_TRY_MPI(MPI_Query_thread(&provided));
  } else {
    SLUICE_TRY_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    state.owns_finalize = true;
  }
  std::atexit(FinalizeAtExit);
  SetJobAbortFunction(&AbortWorld);
  if (provided < MPI_THREAD_MULTIPLE) {
    return FailedPreconditionError(
        "the MPI library provides thread level {} but Sluice needs MPI_THREAD_MULTIPLE ({}): "
        "use an MPI built with thread support (Open MPI: ompi_info | grep 'THREAD_MULTIPLE')",
        provided, MPI_THREAD_MULTIPLE);
  }
  SLUICE_TRY_MPI(MPI_Op_create(&HalfSum<kernels::Bf16ToF32, kernels::F32ToBf16>, /*commute=*/1,
                               &state.bf16_sum));
  SLUICE_TRY_MPI(
      MPI_Op_create(&HalfSum<kernels::F16ToF32, kernels::F32ToF16>, /*commute=*/1, &state.f16_sum));
  return OkStatus();
}

}  // namespace

Status EnsureMpiInitialized() {
  MpiState& state = State();
  std::lock_guard lock(state.mutex);
  if (!state.attempted) {
    state.attempted = true;
    state.init_status = InitializeLocked(state);
    if (!state.init_status.ok()) state.init_status.WithContext("initialising MPI");
  }
  return state.init_status;
}

bool MpiFinalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

MPI_Datatype MpiTransferType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
    case DType::kF16:
      return MPI_UINT16_T;
  }
  return MPI_UINT16_T;
}

MPI_Op MpiSumOp(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF64:
      return MPI_SUM;
    case DType::kBF16:
      return State().bf16_sum;
    case DType::kF16:
      return State().f16_sum;
  }
  return MPI_OP_NULL;
}

void DivideInPlace(void* data, size_t count, DType dtype, int world) {
  const float divisor = static_cast<float>(world);
  if (dtype == DType::kF32) {
    auto* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] /= divisor;
    return;
  }
  if (dtype == DType::kF64) {
    auto* values = static_cast<double*>(data);
    for (size_t i = 0; i < count; ++i) values[i] /= static_cast<double>(world);
    return;
  }
  auto* values = static_cast<uint16_t*>(data);
  if (dtype == DType::kBF16) {
    for (size_t i = 0; i < count; ++i) {
      values[i] = kernels::F32ToBf16(kernels::Bf16ToF32(values[i]) / divisor);
    }
  } else {
    for (size_t i = 0; i < count; ++i) {
      values[i] = kernels::F32ToF16(kernels::F16ToF32(values[i]) / divisor);
    }
  }
}

std::vector<int> WorldRanksOf(MPI_Comm comm, const std::vector<int>& ranks) {
  std::vector<int> world(ranks.size(), MPI_UNDEFINED);
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Group world_group = MPI_GROUP_NULL;
  if (MPI_Comm_group(comm, &group) == MPI_SUCCESS &&
      MPI_Comm_group(MPI_COMM_WORLD, &world_group) == MPI_SUCCESS && !ranks.empty()) {
    MPI_Group_translate_ranks(group, static_cast<int>(ranks.size()), ranks.data(), world_group,
                              world.data());
  }
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
  return world;
}

}  // namespace sluice::mpi
