// Linked instead of the CUDA ops backend when the build found no nvcc.
#include "runtime/ops/cuda_ops_backend.h"

namespace sluice::ops::internal {

Result<std::unique_ptr<OpsBackend>> CreateCudaOpsBackend(Device& device) {
  return UnavailableError(
      "no CUDA ops backend for device {}: this sluice binary was built without CUDA (at "
      "configure time nvcc or NCCL was not found, or SLUICE_ENABLE_CUDA was OFF); install the "
      "CUDA toolkit and NCCL, then reconfigure and rebuild",
      device.name());
}

}  // namespace sluice::ops::internal
