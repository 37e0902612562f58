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

// The CPU GEMM: what OpenBLAS picked on this machine ({"openblas": {"core", "config",
// "threads"}}) and the device.cpu_gemm setting ({"cpu_gemm": {"value", "source", "env_var",
// "kernels": {"blas", "deterministic"}}}): its default, or the SLUICE_CFG_ override in this
// environment, and the kernel each choice runs here.
nlohmann::json ProbeGemm();

Status ProbeIoUringSupport();
Status ProbeODirectSupport(const std::string& dir);

}  // namespace sluice::cli
