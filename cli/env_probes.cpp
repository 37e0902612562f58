#include "cli/env_probes.h"

#include <cstdlib>

#include "engine/config/config_schema.h"
#include "kernels/cpu/gemm.h"
#include "offload/io_probe.h"

namespace sluice::cli {

nlohmann::json ProbeGemm() {
  namespace cpu = kernels::cpu;
  const cpu::BlasInfo blas = cpu::DescribeBlas();
  const SettingSpec& spec = ConfigRegistry().Get("device.cpu_gemm");
  std::string value = std::get<std::string>(spec.default_value);
  std::string source = "default";
  // A run started from this environment gets the override unless its config or --set says
  // otherwise; a config file can still choose, so this is what a run gets by default here.
  if (const char* env = std::getenv(spec.env_var.c_str()); env != nullptr) {
    value = env;
    source = "env";
  }
  // The kernel behind each choice, named as a run's summary names it.
  nlohmann::json kernels;
  nlohmann::json backends;
  for (cpu::GemmBackend backend : {cpu::GemmBackend::kBlas, cpu::GemmBackend::kDeterministic}) {
    const cpu::GemmKernel k = cpu::DescribeGemmKernel(backend);
    const std::string name(cpu::GemmBackendName(backend));
    kernels[name] = k.name;
    backends[name] = {{"library", k.library}, {"version", k.version}, {"core", k.core},
                      {"threads", k.threads}, {"name", k.name},       {"note", k.note}};
  }
  return {
      {"openblas",
       {{"core", blas.core},
        {"picked", blas.picked},
        {"reason", blas.reason},
        {"config", blas.config},
        {"threads", blas.threads}}},
      {"backends", backends},
      {"cpu_gemm",
       {{"value", value}, {"source", source}, {"env_var", spec.env_var}, {"kernels", kernels}}}};
}

Status ProbeIoUringSupport() { return offload::ProbeIoUring(); }

Status ProbeODirectSupport(const std::string& dir) { return offload::ProbeODirect(dir); }

}  // namespace sluice::cli
