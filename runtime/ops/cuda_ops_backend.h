// Entry point of the CUDA ops backend, defined by runtime/ops/cuda/ when the build has CUDA and by
// runtime/ops/cuda_ops_unavailable.cpp otherwise. Use ops_factory.h instead.
#pragma once

#include <memory>

#include "runtime/ops/ops_backend.h"

namespace sluice::ops::internal {

Result<std::unique_ptr<OpsBackend>> CreateCudaOpsBackend(Device& device);

}  // namespace sluice::ops::internal
