// kernels/cpu/gemm_dnnl.h in a build without oneDNN: configure did not find Debian's
// libdnnl-dev, or SLUICE_WITH_DNNL was OFF. device.cpu_gemm: blas then runs OpenBLAS.
#include <string>

#include "kernels/cpu/gemm_dnnl.h"

namespace sluice::kernels::cpu {

bool DnnlBuilt() { return false; }
std::string DnnlVersion() { return ""; }
std::string DnnlIsa() { return ""; }
std::string DnnlCapIsa(int) { return "oneDNN is not in this build"; }

std::string DnnlGemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                     const float*, int64_t, float, float*, int64_t) {
  return "oneDNN is not in this build: configure did not find Debian's libdnnl-dev (which "
         "scripts/install-deps.sh installs; then re-run cmake), or SLUICE_WITH_DNNL was OFF";
}

std::string DnnlMatmul(bool, bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                       const float*, int64_t, float, float*, int64_t, std::string*) {
  return DnnlGemm(false, false, 0, 0, 0, 0.0f, nullptr, 0, nullptr, 0, 0.0f, nullptr, 0);
}

}  // namespace sluice::kernels::cpu
