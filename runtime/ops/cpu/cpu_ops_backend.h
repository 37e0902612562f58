// The cpu column of the ops table: kernels/cpu in f32, each op a host function on the stream.
// Create through CreateOpsBackend (runtime/ops/ops_factory.h).
#pragma once

#include <memory>

#include "runtime/ops/ops_backend.h"

namespace sluice::ops {

std::unique_ptr<OpsBackend> CreateCpuOpsBackend(Device& device);

}  // namespace sluice::ops
