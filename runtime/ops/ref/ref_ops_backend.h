// The reference column of the ops table: kernels/ref in f64 (the backend of the finite-difference
// tests), each op a host function on the stream.
// Create through CreateReferenceOpsBackend (runtime/ops/ops_factory.h).
#pragma once

#include <memory>

#include "runtime/ops/ops_backend.h"

namespace sluice::ops {

std::unique_ptr<OpsBackend> CreateRefOpsBackend(Device& device);

}  // namespace sluice::ops
