// Entry points of the CUDA device backend, defined by runtime/device/cuda/ when the build has
// CUDA and by runtime/device/cuda_unavailable.cpp otherwise. Use device_factory.h instead.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/device.h"

namespace sluice::internal {

Result<std::unique_ptr<Device>> CreateCudaDevice(int index, uint64_t memory_limit_bytes);
int CountCudaDevices();

}  // namespace sluice::internal
