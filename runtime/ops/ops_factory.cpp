#include "runtime/ops/ops_factory.h"

#include "runtime/ops/cpu/cpu_ops_backend.h"
#include "runtime/ops/cuda_ops_backend.h"
#include "runtime/ops/ref/ref_ops_backend.h"

namespace sluice::ops {

Result<std::unique_ptr<OpsBackend>> CreateOpsBackend(Device& device,
                                                     const OpsBackendOptions& options) {
  switch (device.kind()) {
    case DeviceKind::kCpu:
      return CreateCpuOpsBackend(device, options.cpu_threads);
    case DeviceKind::kCuda:
      return internal::CreateCudaOpsBackend(device);
  }
  return InvalidArgumentError("no ops backend for device kind {}", static_cast<int>(device.kind()));
}

Result<std::unique_ptr<OpsBackend>> CreateReferenceOpsBackend(Device& device) {
  if (device.kind() != DeviceKind::kCpu) {
    return FailedPreconditionError(
        "the reference ops backend runs kernels/ref as host functions, which cannot read the "
        "memory of device {}; use a cpu device for reference runs",
        device.name());
  }
  return CreateRefOpsBackend(device);
}

}  // namespace sluice::ops
