#include "cli/build_info.h"

#include <fmt/format.h>

#include "cli/env_probes.h"
#include "kernels/cpu/cpu_features.h"
#include "runtime/comm/mpi/mpi_call.h"

// Defined for this file by cli/CMakeLists.txt; the fallbacks keep it compiling elsewhere.
#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif
#ifndef SLUICE_BUILD_TYPE
#define SLUICE_BUILD_TYPE "unknown"
#endif
#ifndef SLUICE_BUILD_CUDA
#define SLUICE_BUILD_CUDA 0
#endif
#ifndef SLUICE_BUILD_CUDNN
#define SLUICE_BUILD_CUDNN 0
#endif
#ifndef SLUICE_BUILD_DNNL
#define SLUICE_BUILD_DNNL 0
#endif
#ifndef SLUICE_BUILD_CUDA_VERSION
#define SLUICE_BUILD_CUDA_VERSION ""
#endif
#ifndef SLUICE_BUILD_CUDA_ARCHITECTURES
#define SLUICE_BUILD_CUDA_ARCHITECTURES ""
#endif

namespace sluice::cli {
namespace {

std::string Compiler() {
#if defined(__clang__)
  return fmt::format("Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "unknown compiler";
#endif
}

// The first line of MPI's own description (callable before MPI_Init).
std::string MpiLibrary() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  if (MPI_Get_library_version(version, &length) != MPI_SUCCESS) return "unknown";
  std::string text(version, static_cast<size_t>(length));
  return text.substr(0, text.find_first_of("\n,"));
}

std::string YesNo(bool value) { return value ? "yes" : "no"; }

}  // namespace

nlohmann::json BuildInfo() {
  const bool cuda = SLUICE_BUILD_CUDA != 0;
  nlohmann::json cuda_json = {{"compiled", cuda}};
  if (cuda) {
    cuda_json["version"] = SLUICE_BUILD_CUDA_VERSION;
    cuda_json["architectures"] = SLUICE_BUILD_CUDA_ARCHITECTURES;
  }
  const kernels::CpuFeatures& cpu = kernels::DetectCpuFeatures();
  return {{"version", SLUICE_VERSION},
          {"build_type", SLUICE_BUILD_TYPE},
          {"compiler", Compiler()},
          {"cuda", cuda_json},
          // NCCL is required for the CUDA backends (cmake/SluiceCuda.cmake): both or neither.
          {"nccl", cuda},
          {"cudnn", SLUICE_BUILD_CUDNN != 0},
          {"onednn", SLUICE_BUILD_DNNL != 0},
          {"kernel_isa", kernels::IsaName(kernels::SelectedIsa())},
          {"cpu", {{"avx2", cpu.avx2}, {"avx512", cpu.avx512}, {"avx512_bf16", cpu.avx512_bf16}}},
          {"gemm", ProbeGemm()},
          {"mpi", MpiLibrary()}};
}

std::string VersionText() {
  const nlohmann::json info = BuildInfo();
  std::string text = fmt::format("sluice {}\n", info["version"].get<std::string>());
  auto line = [&text](std::string_view key, const std::string& value) {
    text += fmt::format("  {:<11}{}\n", key, value);
  };
  line("build", fmt::format("{}, {}", info["build_type"].get<std::string>(),
                            info["compiler"].get<std::string>()));
  const nlohmann::json& cuda = info["cuda"];
  line("CUDA", cuda["compiled"].get<bool>()
                   ? fmt::format("compiled in (CUDA {}, architectures {})",
                                 cuda["version"].get<std::string>(),
                                 cuda["architectures"].get<std::string>())
                   : "not compiled in (configured without nvcc or NCCL): CPU device only");
  line("NCCL", YesNo(info["nccl"].get<bool>()));
  line("cuDNN", info["cudnn"].get<bool>() ? "yes (fused attention)" : "no");
  line("oneDNN", info["onednn"].get<bool>()
                     ? "yes (device.cpu_gemm blas runs dnnl_sgemm)"
                     : "no (device.cpu_gemm blas runs OpenBLAS; libdnnl-dev adds it)");
  const nlohmann::json& cpu = info["cpu"];
  line("CPU ISA",
       fmt::format("kernels use {} (this CPU: AVX2 {}, AVX-512 {}, AVX512_BF16 {}; "
                   "SLUICE_ISA lowers it)",
                   info["kernel_isa"].get<std::string>(), YesNo(cpu["avx2"].get<bool>()),
                   YesNo(cpu["avx512"].get<bool>()), YesNo(cpu["avx512_bf16"].get<bool>())));
  const nlohmann::json& gemm = info["gemm"];
  const nlohmann::json& setting = gemm["cpu_gemm"];
  std::string gemm_text = fmt::format(
      "device.cpu_gemm {} ({})", setting["value"].get<std::string>(),
      setting["source"] == "env" ? setting["env_var"].get<std::string>() : std::string("default"));
  for (const auto& [name, kernel] : setting["kernels"].items()) {
    gemm_text += fmt::format("; {}: {}", name, kernel.get<std::string>());
  }
  line("GEMM", gemm_text);
  line("BLAS",
       fmt::format("OpenBLAS, core {}, {} ({})", gemm["openblas"]["core"].get<std::string>(),
                   gemm["openblas"]["reason"].get<std::string>(),
                   gemm["openblas"]["config"].get<std::string>()));
  line("MPI", info["mpi"].get<std::string>());
  text.pop_back();  // CLI11 ends the version text with its own newline
  return text;
}

}  // namespace sluice::cli
