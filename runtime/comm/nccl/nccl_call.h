// SLUICE_TRY_NCCL: the NCCL member of the foreign-call macro family (runtime/foreign_call.h).
// SLUICE_COMM_TRY_CUDA covers the few CUDA runtime calls the NCCL backend makes itself (events,
// its own stream, device selection).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "runtime/foreign_call.h"

namespace sluice::nccl {

// "unhandled system error (run with NCCL_DEBUG=INFO for details): <last error>".
inline std::string NcclErrorText(ncclResult_t result) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += std::string(": ") + last;
  return text;
}

inline std::string CudaErrorText(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

}  // namespace sluice::nccl

#define SLUICE_TRY_NCCL(call)                                                               \
  SLUICE_FOREIGN_CALL("NCCL", call, #call, sluice_nccl_rc_, sluice_nccl_rc_ != ncclSuccess, \
                      ::sluice::nccl::NcclErrorText(sluice_nccl_rc_))
#define SLUICE_COMM_TRY_CUDA(call)                                                          \
  SLUICE_FOREIGN_CALL("CUDA", call, #call, sluice_cuda_rc_, sluice_cuda_rc_ != cudaSuccess, \
                      ::sluice::nccl::CudaErrorText(sluice_cuda_rc_))
