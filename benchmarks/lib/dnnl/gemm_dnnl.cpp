// bench_gemm's oneDNN backend: dnnl_sgemm, row-major like cblas_sgemm with CblasRowMajor.
#include <dnnl.h>
#include <dnnl_debug.h>
#include <fmt/format.h>

#include "benchmarks/lib/cpu_gemm_dnnl.h"

namespace sluice::bench {

bool DnnlBuilt() { return true; }

std::string DnnlDescription() {
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "non-OpenMP runtime";
  return fmt::format("oneDNN {}.{}.{} ({}), CPU ISA {}", v->major, v->minor, v->patch, runtime,
                     dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
}

Status DnnlCapIsa(kernels::Isa isa) {
  dnnl_cpu_isa_t cap = isa == kernels::Isa::kAvx512 ? dnnl_cpu_isa_all
                       : isa == kernels::Isa::kAvx2 ? dnnl_cpu_isa_avx2
                                                    : dnnl_cpu_isa_sse41;
  dnnl_status_t status = dnnl_set_max_cpu_isa(cap);
  if (status != dnnl_success) {
    return FailedPreconditionError(
        "dnnl_set_max_cpu_isa({}): {}; it must come before oneDNN's first GEMM",
        dnnl_cpu_isa2str(cap), dnnl_status2str(status));
  }
  return OkStatus();
}

Status DnnlGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                    lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    return InternalError("dnnl_sgemm({}, {}, m {}, n {}, k {}): {}", trans_a ? 'T' : 'N',
                         trans_b ? 'T' : 'N', m, n, k, dnnl_status2str(status));
  }
  return OkStatus();
}

}  // namespace sluice::bench
