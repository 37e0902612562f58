// oneDNN's dnnl_sgemm behind device.cpu_gemm: blas, where configure found Debian's libdnnl-dev
// (cmake/SluiceDependencies.cmake). One implementation per build, in kernels/cpu/dnnl/ (its own
// CMake target, kernels/CMakeLists.txt): gemm_dnnl.cpp calls the library, gemm_dnnl_absent.cpp
// says it is not built. oneDNN dispatches by CPUID itself (AVX2, AVX-512; its fp32 sgemm does
// not use AMX, which takes bf16 and int8), so unlike OpenBLAS it needs no core set for new CPUs.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::kernels::cpu {

bool DnnlBuilt();

// "2.6.3"; "" where not built.
std::string DnnlVersion();

// The highest ISA oneDNN dispatches to here, in its words ("avx512_core_amx", "avx2"); "" where
// not built. Fixed by the first product: DnnlCapIsa must come before it.
std::string DnnlIsa();

// Caps oneDNN's dispatch: 2 = no cap (AVX-512 and up), 1 = AVX2, 0 = SSE4.1 (kernels::Isa's
// values). Returns "" or why not (after oneDNN's first product the cap can no longer change).
std::string DnnlCapIsa(int isa_level);

// C = alpha op(A) op(B) + beta C, row-major, gemm_fixed.h's arguments, on the calling thread's
// OpenMP thread count (omp_get_max_threads()). Returns "" or oneDNN's error.
std::string DnnlGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc);

// oneDNN's matmul primitive on the same arguments (fp32 in and out), one primitive cached per
// shape, layout, alpha and beta. bf16 false: fp32 arithmetic (its brgemm kernels, another route
// than dnnl_sgemm). bf16 true: A and B are rounded to bf16 (a oneDNN reorder per call, timed with
// the product) and multiplied into fp32, on AMX tiles where the CPU has them; accuracy is then
// bf16's (about 2^-7 of Σ|a·b|), not fp32's, so no device.cpu_gemm mode runs it: bench_gemm times
// it for the record. A cached bf16 product serves one call at a time. Returns "" or the error;
// `impl`, when given, gets oneDNN's name for the kernel it ran ("brg:avx512_core_amx").
std::string DnnlMatmul(bool bf16, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                       float beta, float* c, int64_t ldc, std::string* impl = nullptr);

}  // namespace sluice::kernels::cpu
