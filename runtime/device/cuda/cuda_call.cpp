#include "runtime/device/cuda/cuda_call.h"

#include <fmt/format.h>

namespace sluice::internal {

std::string CudaErrorText(cudaError_t error) {
  return fmt::format("{} ({})", cudaGetErrorString(error), cudaGetErrorName(error));
}

}  // namespace sluice::internal
