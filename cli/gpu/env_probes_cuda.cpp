#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "cli/env_probes.h"

namespace sluice::cli {
namespace {

std::string CudaVersionText(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

}  // namespace

nlohmann::json ProbeGpus() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorInsufficientDriver || rc == cudaErrorNoDevice || count == 0) {
    return {{"error", fmt::format("no GPU or no NVIDIA driver on this machine ({})",
                                  cudaGetErrorName(rc))}};
  }
  if (rc != cudaSuccess) {
    return {{"error", fmt::format("cudaGetDeviceCount failed: {}", cudaGetErrorString(rc))}};
  }
  int runtime = 0, driver = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  ncclGetVersion(&nccl);
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    devices.push_back({{"index", i},
                       {"name", prop.name},
                       {"memory_bytes", static_cast<uint64_t>(prop.totalGlobalMem)},
                       {"sm", prop.major * 10 + prop.minor}});
  }
  return {{"cuda_runtime", CudaVersionText(runtime)},
          {"cuda_driver", CudaVersionText(driver)},
          {"nccl", fmt::format("{}.{}.{}", nccl / 10000, (nccl % 10000) / 100, nccl % 100)},
          {"devices", devices}};
}

}  // namespace sluice::cli
