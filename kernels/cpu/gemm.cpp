#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_dnnl.h"
#include "kernels/cpu/gemm_fixed.h"
#include "kernels/cpu/gemm_openblas.h"
#include "kernels/ref/ops_common.h"

namespace sluice::kernels::cpu {
namespace {

std::atomic<GemmBackend> current_backend{GemmBackend::kDeterministic};

// The library kBlas runs, settled on first use (-1: not yet).
std::atomic<int> current_library{-1};

// Why SLUICE_CPU_BLAS was not followed; "" when it was, or is unset.
std::string& LibraryNote() {
  static std::string* note = new std::string;
  return *note;
}

BlasLibrary FastestBuilt() { return DnnlBuilt() ? BlasLibrary::kOneDnn : BlasLibrary::kOpenBlas; }

BlasLibrary LibraryFromEnvironment() {
  const char* env = std::getenv("SLUICE_CPU_BLAS");
  if (env == nullptr || *env == '\0') return FastestBuilt();
  const std::optional<BlasLibrary> named = BlasLibraryFromName(env);
  std::string note;
  if (!named.has_value()) {
    note = std::string("SLUICE_CPU_BLAS=") + env +
           " is not one of onednn, openblas: ignored (unset it, or name one)";
  } else if (!BlasLibraryBuilt(*named)) {
    note = std::string("SLUICE_CPU_BLAS=") + env +
           ": this build has no oneDNN (install libdnnl-dev with scripts/install-deps.sh and "
           "re-run cmake): ignored";
  } else {
    return *named;
  }
  std::fprintf(stderr, "sluice: %s\n", note.c_str());
  LibraryNote() = note;
  return FastestBuilt();
}

}  // namespace

void SettleDnnl() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!DnnlBuilt()) return;
    const Isa isa = SelectedIsa();
    const CpuFeatures& cpu = DetectCpuFeatures();
    const Isa best = cpu.avx512 ? Isa::kAvx512 : cpu.avx2 ? Isa::kAvx2 : Isa::kScalar;
    if (isa < best) {
      const std::string error = DnnlCapIsa(static_cast<int>(isa));
      if (!error.empty()) std::fprintf(stderr, "sluice: %s\n", error.c_str());
    }
  });
}

namespace {

// C = beta * C, or 0 where beta is 0 (NaN dropped, as BLAS does not read C then): the product
// of an empty sum, which oneDNN rejects as invalid arguments and cblas for its leading
// dimensions.
void ScaleOnly(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

void DnnlGemmOrFail(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) {
  SettleDnnl();
  if (k == 0) return ScaleOnly(m, n, beta, c, ldc);
  const std::string error =
      DnnlGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (!error.empty()) {
    internal::OpsFail("Gemm", "%s (m %lld, n %lld, k %lld, lda %lld, ldb %lld, ldc %lld)",
                      error.c_str(), static_cast<long long>(m), static_cast<long long>(n),
                      static_cast<long long>(k), static_cast<long long>(lda),
                      static_cast<long long>(ldb), static_cast<long long>(ldc));
  }
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

std::string_view BlasLibraryName(BlasLibrary library) {
  switch (library) {
    case BlasLibrary::kOneDnn:
      return "onednn";
    case BlasLibrary::kOpenBlas:
      return "openblas";
  }
  return "?";
}

std::optional<BlasLibrary> BlasLibraryFromName(std::string_view name) {
  for (BlasLibrary library : {BlasLibrary::kOneDnn, BlasLibrary::kOpenBlas}) {
    if (name == BlasLibraryName(library)) return library;
  }
  return std::nullopt;
}

bool BlasLibraryBuilt(BlasLibrary library) {
  return library == BlasLibrary::kOpenBlas || DnnlBuilt();
}

BlasLibrary CurrentBlasLibrary() {
  int value = current_library.load();
  if (value < 0) {
    static std::once_flag once;
    std::call_once(once, [] {
      int unset = -1;
      current_library.compare_exchange_strong(unset, static_cast<int>(LibraryFromEnvironment()));
    });
    value = current_library.load();
  }
  return static_cast<BlasLibrary>(value);
}

void SetBlasLibrary(BlasLibrary library) {
  if (!BlasLibraryBuilt(library)) {
    internal::OpsFail("SetBlasLibrary", "%s is not in this build",
                      std::string(BlasLibraryName(library)).c_str());
  }
  current_library.store(static_cast<int>(library));
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          int threads) {
  if (m == 0 || n == 0) return;
  if (CurrentGemmBackend() == GemmBackend::kDeterministic) {
    GemmFixed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
  } else if (CurrentBlasLibrary() == BlasLibrary::kOneDnn) {
    DnnlGemmOrFail(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    OpenBlasGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

GemmKernel DescribeGemmKernel(GemmBackend backend) {
  GemmKernel kernel;
  if (backend == GemmBackend::kDeterministic) {
    kernel.library = "GemmFixed";
    kernel.core = std::string(IsaName(GemmFixedIsa()));
    kernel.threads = omp_get_max_threads();
    kernel.name = "GemmFixed " + kernel.core;
    return kernel;
  }
  const BlasLibrary library = CurrentBlasLibrary();  // settles SLUICE_CPU_BLAS and its note
  kernel.note = LibraryNote();
  if (library == BlasLibrary::kOneDnn) {
    SettleDnnl();
    kernel.library = "oneDNN";
    kernel.version = DnnlVersion();
    kernel.core = DnnlIsa();
    kernel.threads = omp_get_max_threads();
  } else {
    const BlasInfo blas = DescribeBlas();
    kernel.library = "OpenBLAS";
    kernel.version = OpenBlasVersion();
    kernel.core = blas.core;
    kernel.threads = blas.threads;
    kernel.note += (kernel.note.empty() ? "" : "; ") + ("core " + blas.reason);
  }
  kernel.name = kernel.library + " " + kernel.version + " " + kernel.core;
  return kernel;
}

std::string GemmKernelName(GemmBackend backend) { return DescribeGemmKernel(backend).name; }

BlasInfo DescribeBlas() {
  const OpenBlasCore& settled = SettleOpenBlasCore();
  BlasInfo info;
  info.core = OpenBlasCoreName();  // a benchmark may have switched it since
  info.picked = settled.picked;
  info.reason = info.core == settled.core ? settled.reason : "switched by a benchmark";
  info.config = OpenBlasConfig();
  info.threads = openblas_get_num_threads();
  return info;
}

}  // namespace sluice::kernels::cpu
