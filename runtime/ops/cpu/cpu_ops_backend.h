// The cpu column of the ops table: kernels/cpu in f32, each op a host function on the stream.
// Create through CreateOpsBackend (runtime/ops/ops_factory.h).
#pragma once

#include <memory>

#include "runtime/ops/ops_backend.h"

namespace sluice::ops {

// threads: the OpenMP team size of each op (0: OpenMP's default). Results do not depend on it.
std::unique_ptr<OpsBackend> CreateCpuOpsBackend(Device& device, int threads);

}  // namespace sluice::ops
