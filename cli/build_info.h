// What this sluice binary was built with, for `sluice --version`: the version, the build type and
// compiler, whether CUDA, NCCL, cuDNN and oneDNN were compiled in (configure's findings, passed by
// cli/CMakeLists.txt), and what the CPU path picks on this machine: the kernel ISA, the GEMM
// behind device.cpu_gemm and the OpenBLAS core (cli/env_probes.h), and the MPI library.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sluice::cli {

nlohmann::json BuildInfo();

// "sluice 0.1.0\n  build      Release, GCC 12.2.0\n  CUDA       not compiled in ...": one line
// per item, no newline at the end.
std::string VersionText();

}  // namespace sluice::cli
