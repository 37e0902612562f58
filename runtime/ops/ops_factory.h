// Creates the ops backend of a Device: the column of the ops table for its kind.
#pragma once

#include <memory>

#include "runtime/ops/ops_backend.h"

namespace sluice::ops {

struct OpsBackendOptions {
  // cpu: the OpenMP team size of each op (`device.threads`; 0: OpenMP's default). Results do not
  // depend on it. Ignored by the other columns.
  int cpu_threads = 0;
};

// cpu device: kernels/cpu (f32). cuda device: kernels/cuda (f32, bf16); Unavailable when this
// binary was built without CUDA. The Device must outlive the backend.
Result<std::unique_ptr<OpsBackend>> CreateOpsBackend(Device& device,
                                                     const OpsBackendOptions& options = {});

// kernels/ref in fp64 as host functions on the streams of `device`, for the finite-difference
// tests and as the yardstick of the other columns. FailedPrecondition on a CUDA device, whose
// memory host functions may not touch.
Result<std::unique_ptr<OpsBackend>> CreateReferenceOpsBackend(Device& device);

}  // namespace sluice::ops
