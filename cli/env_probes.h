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

// The CPU GEMM: the kernel behind each device.cpu_gemm choice here ({"backends": {"blas",
// "deterministic"}: {"library", "version", "core", "threads", "name", "note"}}), OpenBLAS as this
// process runs it ({"openblas": {"core", "picked", "reason", "config", "threads"}}: the core
// Sluice set, and the one OpenBLAS picked by itself) and the setting ({"cpu_gemm": {"value",
// "source", "env_var", "kernels": {"blas", "deterministic"}: name}}): its default, or the
// SLUICE_CFG_ override in this environment.
nlohmann::json ProbeGemm();

Status ProbeIoUringSupport();
Status ProbeODirectSupport(const std::string& dir);

}  // namespace sluice::cli
