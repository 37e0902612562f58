// Helpers for launcher implementations (included by .cu/.cpp files of kernels/cuda only).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/launch_status.h"

namespace sluice::kernels::cuda::internal {

// "cudaErrorInvalidValue: invalid argument (after LayerNormForward)"
LaunchStatus FromCuda(cudaError_t error, const char* what);
LaunchStatus FromCublas(cublasStatus_t status, const char* what);

// The launch status of the kernels just enqueued by `what`.
inline LaunchStatus AfterLaunch(const char* what) { return FromCuda(cudaGetLastError(), what); }

// The launch configuration of a programmatic dependent launch: the kernel may be scheduled
// before the previous one on `stream` has finished (once that one executes
// griddepcontrol.launch_dependents) and must itself wait (griddepcontrol.wait) before reading
// what the previous one wrote. Launch with cudaLaunchKernelEx(&launch.config, ...); not
// copyable, since config points at attribute.
struct DependentLaunch {
  DependentLaunch(dim3 grid, dim3 block, cudaStream_t stream) {
    config.gridDim = grid;
    config.blockDim = block;
    config.stream = stream;
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  DependentLaunch(const DependentLaunch&) = delete;
  DependentLaunch& operator=(const DependentLaunch&) = delete;

  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1] = {};
};

// Whether p may be read and written in `bytes`-wide accesses (16: the kernels' vector loads).
inline bool Aligned(const void* p, size_t bytes = 16) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Blocks of `threads` covering n items, capped so a grid-stride loop covers the rest.
inline unsigned GridFor(long long n, unsigned threads, unsigned cap = 65535u * 4u) {
  long long blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

}  // namespace sluice::kernels::cuda::internal

// Returns from the enclosing launcher when a CUDA runtime call fails.
#define SLUICE_CUDA_LAUNCH_TRY(call)                                         \
  do {                                                                       \
    cudaError_t sluice_rc_ = (call);                                         \
    if (sluice_rc_ != cudaSuccess)                                           \
      return ::sluice::kernels::cuda::internal::FromCuda(sluice_rc_, #call); \
  } while (0)
#define SLUICE_CUBLAS_LAUNCH_TRY(call)                                         \
  do {                                                                         \
    cublasStatus_t sluice_rc_ = (call);                                        \
    if (sluice_rc_ != CUBLAS_STATUS_SUCCESS)                                   \
      return ::sluice::kernels::cuda::internal::FromCublas(sluice_rc_, #call); \
  } while (0)
// Answers a launcher argument check with InvalidArgument.
#define SLUICE_CUDA_LAUNCH_REQUIRE(cond, message)                                        \
  do {                                                                                   \
    if (!(cond)) return ::sluice::kernels::cuda::LaunchStatus::InvalidArgument(message); \
  } while (0)
