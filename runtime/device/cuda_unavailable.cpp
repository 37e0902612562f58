// Linked instead of the CUDA backend when the build found no nvcc.
#include "runtime/device/cuda_backend.h"

namespace sluice::internal {

Result<std::unique_ptr<Device>> CreateCudaDevice(int index, uint64_t memory_limit_bytes) {
  return UnavailableError(
      "device.kind is \"cuda\" but this sluice binary was built without CUDA (at configure time "
      "nvcc or NCCL was not found, or SLUICE_ENABLE_CUDA was OFF); install the CUDA toolkit and "
      "NCCL, then reconfigure and rebuild (cmake -S . -B build -DSLUICE_ENABLE_CUDA=ON && cmake "
      "--build build), or use device.kind \"cpu\"");
}

int CountCudaDevices() { return 0; }

}  // namespace sluice::internal
