// The GEMM behind the CPU linear and attention kernels, chosen once per process (the setting
// device.cpu_gemm, applied by the trainer when it builds the model):
//   kBlas           the fastest library GEMM this build has (BlasLibrary below): oneDNN's
//                   dnnl_sgemm where configure found libdnnl-dev, else OpenBLAS cblas_sgemm with
//                   its core set for the CPU (gemm_openblas.h). Its bits depend on the library,
//                   the kernel it dispatches to (AVX2, AVX-512) and its thread count;
//   kDeterministic  GemmFixed (gemm_fixed.h): the same bits on every x86-64 CPU and thread
//                   count; what stored results (tests/golden) are made with.
// A process-wide choice rather than a parameter of every op: like OpenBLAS's own thread count it
// is a property of the run, and the ops' signatures (engine/model/ops_backend.h) stay as they are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::kernels::cpu {

enum class GemmBackend { kBlas, kDeterministic };

std::string_view GemmBackendName(GemmBackend backend);  // "blas", "deterministic"
std::optional<GemmBackend> GemmBackendFromName(std::string_view name);

// Process-wide; atomic, so setting it while no op runs is safe from any thread. Default
// kDeterministic, as the setting's default: benchmarks and tools that do not go through the trainer
// run the GEMM training runs.
void SetGemmBackend(GemmBackend backend);
GemmBackend CurrentGemmBackend();

// C [m, n] = alpha * op(A) · op(B) + beta * C, row-major, through the current backend; the
// arguments mean what they mean to GemmFixed. threads sizes GemmFixed's team; the libraries use
// their own count (oneDNN: the calling thread's omp_get_max_threads(); OpenBLAS: its pool,
// openblas_set_num_threads, which in its OpenMP build sets the former too). k == 0 is allowed
// (C = beta * C, or 0 when beta is 0).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads);

// The library behind kBlas. Chosen by measurement (benchmarks/results/cpu_gemm_2026-11-27.md):
// oneDNN's sgemm is the fastest on AVX-512 and on AVX2 at the model's shapes, and dispatches by
// CPUID; OpenBLAS (Debian's) is the fallback that every build has.
enum class BlasLibrary { kOneDnn, kOpenBlas };

std::string_view BlasLibraryName(BlasLibrary library);  // "onednn", "openblas"
std::optional<BlasLibrary> BlasLibraryFromName(std::string_view name);
bool BlasLibraryBuilt(BlasLibrary library);

// What kBlas runs: SLUICE_CPU_BLAS (onednn|openblas) when it names a library this build has,
// else the fastest built. Process-wide like the backend; SetBlasLibrary (tests, benchmarks)
// overrides it and must name a built library (CHECKed).
BlasLibrary CurrentBlasLibrary();
void SetBlasLibrary(BlasLibrary library);

// oneDNN fixes its ISA cap at its first product: this caps it, once per process, at the ISA
// Sluice's own kernels use (SLUICE_ISA, ForceIsa), so that an AVX2 machine can be emulated for
// every CPU kernel. Gemm and DescribeGemmKernel call it; a direct gemm_dnnl.h caller (a benchmark)
// calls it first.
void SettleDnnl();

// The kernel a backend runs here, for `sluice env`, run summaries and benchmark records.
struct GemmKernel {
  std::string library;  // "GemmFixed", "oneDNN", "OpenBLAS"
  std::string version;  // "2.6.3", "0.3.21"; "" for GemmFixed (it is Sluice's)
  // The kernel family: GemmFixed's ISA variant ("avx512"), oneDNN's dispatch ISA
  // ("avx512_core_amx"), OpenBLAS's core ("SkylakeX").
  std::string core;
  // The team one product gets when called with threads 0 (GemmFixed) or as the library stands
  // now: omp_get_max_threads() for GemmFixed and oneDNN, openblas_get_num_threads() for OpenBLAS.
  int threads = 0;
  // "GemmFixed avx512", "oneDNN 2.6.3 avx512_core_amx", "OpenBLAS 0.3.21 SkylakeX"
  std::string name;
  std::string note;  // how the core was chosen (OpenBLAS), or why SLUICE_CPU_BLAS was not followed
};
GemmKernel DescribeGemmKernel(GemmBackend backend = CurrentGemmBackend());
// DescribeGemmKernel(backend).name
std::string GemmKernelName(GemmBackend backend = CurrentGemmBackend());

// OpenBLAS as this process runs it (after Sluice set its core, gemm_openblas.h), named even
// where kBlas runs oneDNN: `sluice env` and run records show both.
struct BlasInfo {
  std::string core;    // the core it runs: "SkylakeX", "Haswell", "Prescott"
  std::string picked;  // the core OpenBLAS picked by itself as it loaded
  std::string reason;  // why `core` ("picked by OpenBLAS", "set by Sluice for avx512 (...)")
  std::string config;  // openblas_get_config(): version and build options
  int threads = 0;     // openblas_get_num_threads()
};
BlasInfo DescribeBlas();

}  // namespace sluice::kernels::cpu
