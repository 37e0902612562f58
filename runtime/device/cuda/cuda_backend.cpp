#include "runtime/device/cuda_backend.h"

#include <cuda_runtime_api.h>

#include "runtime/device/cuda/cuda_device.h"

namespace sluice::internal {

Result<std::unique_ptr<Device>> CreateCudaDevice(int index, uint64_t memory_limit_bytes) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                          CudaDevice::Create(index, memory_limit_bytes));
  return std::unique_ptr<Device>(std::move(device));
}

int CountCudaDevices() {
  int count = 0;
  // No driver or no GPU: cudaErrorNoDevice / cudaErrorInsufficientDriver, both mean none.
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

}  // namespace sluice::internal
