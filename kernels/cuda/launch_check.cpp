#include "kernels/cuda/launch_check.h"

#include <string>

namespace sluice::kernels::cuda::internal {

LaunchStatus FromCuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return LaunchStatus::Ok();
  return LaunchStatus::Error(LaunchStatus::Code::kCudaError, std::string(cudaGetErrorName(error)) +
                                                                 ": " + cudaGetErrorString(error) +
                                                                 " (in " + what + ")");
}

LaunchStatus FromCublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return LaunchStatus::Ok();
  return LaunchStatus::Error(LaunchStatus::Code::kCublasError,
                             std::string(cublasLtGetStatusName(status)) + ": " +
                                 cublasLtGetStatusString(status) + " (in " + what + ")");
}

}  // namespace sluice::kernels::cuda::internal
