#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_fixed.h"
#include "kernels/cpu/ops_parallel.h"

namespace sluice::kernels::cpu {
namespace {

std::atomic<GemmBackend> current_backend{GemmBackend::kDeterministic};

void BlasGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  if (k == 0) {  // an empty sum; cblas would reject the leading dimension 0 a caller may pass
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  const char* op = "Gemm";
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, internal::BlasInt(m, op),
              internal::BlasInt(n, op), internal::BlasInt(k, op), alpha, a,
              internal::BlasInt(lda, op), b, internal::BlasInt(ldb, op), beta, c,
              internal::BlasInt(ldc, op));
}

}  // namespace

std::string_view GemmBackendName(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kBlas:
      return "blas";
    case GemmBackend::kDeterministic:
      return "deterministic";
  }
  return "?";
}

std::optional<GemmBackend> GemmBackendFromName(std::string_view name) {
  for (GemmBackend backend : {GemmBackend::kBlas, GemmBackend::kDeterministic}) {
    if (name == GemmBackendName(backend)) return backend;
  }
  return std::nullopt;
}

void SetGemmBackend(GemmBackend backend) { current_backend.store(backend); }

GemmBackend CurrentGemmBackend() { return current_backend.load(); }

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          int threads) {
  if (m == 0 || n == 0) return;
  if (CurrentGemmBackend() == GemmBackend::kDeterministic) {
    GemmFixed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
  } else {
    BlasGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

BlasInfo DescribeBlas() {
  BlasInfo info;
  // OpenBLAS returns pointers to static strings; the config one ends with a space.
  const char* core = openblas_get_corename();
  const char* config = openblas_get_config();
  info.core = core != nullptr ? core : "unknown";
  info.config = config != nullptr ? config : "unknown";
  while (!info.config.empty() && info.config.back() == ' ') info.config.pop_back();
  info.threads = openblas_get_num_threads();
  return info;
}

std::string GemmKernelName(GemmBackend backend) {
  if (backend == GemmBackend::kDeterministic) {
    return "GemmFixed " + std::string(IsaName(GemmFixedIsa()));
  }
  return "OpenBLAS " + DescribeBlas().core;
}

}  // namespace sluice::kernels::cpu
