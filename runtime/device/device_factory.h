// Creates the Device a run asked for (`device.kind`, `device.index`, `device.memory_limit`).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/device.h"
#include "runtime/device/cpu/memory_protection.h"

namespace sluice {

struct DeviceOptions {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  // Capacity of device memory. The cpu device needs one (> 0); for cuda 0 means the GPU's whole
  // memory, and any limit is capped at it.
  uint64_t memory_limit_bytes = 0;
  // cpu: keep host threads out of device memory with protection keys, so that host code reading
  // it faults as it would on a GPU (runtime/device/cpu/memory_protection.h); the environment
  // variable SLUICE_DEVICE_PROTECT=on|off|auto overrides it. cuda: ignored (the hardware enforces
  // it).
  DeviceMemoryProtection memory_protection = DeviceMemoryProtection::kOff;
};

// Unavailable for cuda when the binary was built without CUDA or the GPU index does not exist.
Result<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options);

// Number of CUDA GPUs this process can use; 0 without CUDA (build or driver) or GPUs.
int CudaDeviceCount();

}  // namespace sluice
