// oneDNN's dnnl_sgemm for bench_gemm, when configure found Debian's libdnnl-dev (oneDNN 2.x).
// Two implementations, one per build (benchmarks/CMakeLists.txt picks): dnnl/gemm_dnnl.cpp calls
// the library, dnnl/gemm_dnnl_absent.cpp answers that it was not found. Only the benchmark uses
// oneDNN; the engine's GEMM is kernels/cpu/gemm.h.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "runtime/status.h"

namespace sluice::bench {

// Whether this build has oneDNN.
bool DnnlBuilt();

// "oneDNN 2.6.3 (OpenMP), CPU ISA avx512_core_amx" where built; else why not.
std::string DnnlDescription();

// Caps the ISA oneDNN dispatches to (avx2 keeps it to AVX2 code, scalar to SSE4.1, its lowest);
// takes effect only before its first GEMM.
Status DnnlCapIsa(kernels::Isa isa);

// C = alpha * op(A) · op(B) + beta * C, row-major, with the arguments of GemmFixed
// (kernels/cpu/gemm_fixed.h). oneDNN runs on omp_get_max_threads() threads.
Status DnnlGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc);

}  // namespace sluice::bench
