// The GEMM behind the CPU linear and attention kernels, chosen once per process (the setting
// device.cpu_gemm, applied by the trainer when it builds the model):
//   kBlas           OpenBLAS cblas_sgemm: fastest where OpenBLAS has a kernel for the CPU, but
//                   its bits depend on the kernel it picks (Haswell, SkylakeX, the SSE3
//                   fallback) and on its thread count;
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
// arguments mean what they mean to GemmFixed. threads sizes GemmFixed's team; OpenBLAS uses its
// own pool (openblas_set_num_threads). k == 0 is allowed (C = beta * C, or 0 when beta is 0).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads);

// What the kBlas backend runs on this machine, for `sluice env` and run records.
struct BlasInfo {
  std::string core;    // openblas_get_corename(): the kernel family, e.g. "Haswell", "Prescott"
  std::string config;  // openblas_get_config(): version and build options
  int threads = 0;     // openblas_get_num_threads()
};
BlasInfo DescribeBlas();

// The kernel a backend runs here: "OpenBLAS Haswell" (the core OpenBLAS picked) or
// "GemmFixed avx512" (the variant CPUID and SLUICE_ISA select).
std::string GemmKernelName(GemmBackend backend = CurrentGemmBackend());

}  // namespace sluice::kernels::cpu
