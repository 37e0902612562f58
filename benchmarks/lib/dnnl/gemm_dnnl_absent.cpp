// bench_gemm's oneDNN backend in a build without oneDNN: configure did not find libdnnl-dev, or
// SLUICE_WITH_DNNL was OFF.
#include "benchmarks/lib/cpu_gemm_dnnl.h"

namespace sluice::bench {

bool DnnlBuilt() { return false; }

std::string DnnlDescription() {
  return "oneDNN not in this build: configure did not find Debian's libdnnl-dev (which "
         "scripts/install-deps.sh installs; then re-run cmake), or SLUICE_WITH_DNNL was OFF";
}

Status DnnlCapIsa(kernels::Isa) { return OkStatus(); }

Status DnnlGemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                int64_t, float, float*, int64_t) {
  return UnimplementedError("{}", DnnlDescription());
}

}  // namespace sluice::bench
