#include "runtime/device/device_factory.h"

#include "runtime/device/cpu/cpu_device.h"
#include "runtime/device/cuda_backend.h"

namespace sluice {

Result<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options) {
  switch (options.kind) {
    case DeviceKind::kCpu: {
      SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<CpuDevice> device,
                              CpuDevice::Create(options.index, options.memory_limit_bytes,
                                                options.memory_protection));
      return std::unique_ptr<Device>(std::move(device));
    }
    case DeviceKind::kCuda:
      return internal::CreateCudaDevice(options.index, options.memory_limit_bytes);
  }
  return InvalidArgumentError("unknown device kind {}", static_cast<int>(options.kind));
}

int CudaDeviceCount() { return internal::CountCudaDevices(); }

}  // namespace sluice
