// BLIS for bench_gemm: Debian's libblis4-openmp, loaded at run time (dlopen, RTLD_LOCAL) rather
// than linked, because it exports the same cblas_* and sgemm_ names as OpenBLAS, which the
// engine links: linked together, one library's symbols would silently serve the other's callers.
// Only its own typed API (bli_sgemm, whose names OpenBLAS lacks) is called. Measured, not used by
// the engine: on the machines measured it is slower than oneDNN and GemmFixed
// (benchmarks/results/cpu_gemm_2026-11-27.md).
#pragma once

#include <cstdint>
#include <string>

namespace sluice::bench {

// Loads BLIS once; "" when loaded, else why not (with the package to install).
std::string BlisLoad();

// "BLIS 0.9.0, config haswell (libblis.so.4, OpenMP)"; only after BlisLoad() succeeded.
std::string BlisDescription();

// bli_thread_set_num_threads: BLIS's own count, process-wide.
void BlisSetThreads(int threads);

// C = alpha op(A) op(B) + beta C, row-major, gemm_fixed.h's arguments (BLIS takes strides, so
// a transpose is a swap of row and column stride).
void BlisGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

}  // namespace sluice::bench
