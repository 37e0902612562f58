// Probes behind `sluice env`. The GPU probe has two implementations chosen by CMake:
// env_probes_cuda.cpp (CUDA runtime and NCCL queried) and env_probes_nocuda.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/status.h"

namespace sluice::cli {

// {"cuda_runtime", "cuda_driver", "nccl", "devices": [{"index","name","memory_bytes","sm"}]}
// or {"error": why there are none}.
nlohmann::json ProbeGpus();

Status ProbeIoUringSupport();
Status ProbeODirectSupport(const std::string& dir);

}  // namespace sluice::cli
