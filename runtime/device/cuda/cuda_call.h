// SLUICE_TRY_CUDA: the CUDA runtime member of the foreign-call macro family
// (runtime/foreign_call.h). Returns a Status naming the call, cudaGetErrorName/String, file and
// line from the enclosing function when the call does not return cudaSuccess:
//
//   SLUICE_TRY_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "runtime/foreign_call.h"

namespace sluice::internal {

// "out of memory (cudaErrorMemoryAllocation)"
std::string CudaErrorText(cudaError_t error);

}  // namespace sluice::internal

#define SLUICE_TRY_CUDA(call)                                                               \
  SLUICE_FOREIGN_CALL("CUDA", call, #call, sluice_cuda_rc_, sluice_cuda_rc_ != cudaSuccess, \
                      ::sluice::internal::CudaErrorText(sluice_cuda_rc_))
#define SLUICE_CHECK_CUDA(call)                                                              \
  SLUICE_FOREIGN_CHECK("CUDA", call, #call, sluice_cuda_rc_, sluice_cuda_rc_ != cudaSuccess, \
                       ::sluice::internal::CudaErrorText(sluice_cuda_rc_))
