// GemmFixed: Sluice's own fp32 GEMM whose every output bit is fixed by the operands alone: the
// same on every ISA variant (scalar, AVX2, AVX-512, chosen at run time by CPUID), for every
// thread count and every blocking. Stored results (the golden loss curves) are computed through
// it, so they hold on any x86-64 CPU, whichever kernel OpenBLAS would pick there.
//
// Semantics are cblas_sgemm's with CblasRowMajor:
//   C [m, n] = alpha * op(A) · op(B) + beta * C
// where op(A) is m x k, A(i, p) = a[i * lda + p], or a[p * lda + i] when trans_a; and op(B) is
// k x n, B(p, j) = b[p * ldb + j], or b[j * ldb + p] when trans_b; C(i, j) = c[i * ldc + j].
//
// The numerics, which every variant reproduces bit for bit (this is the contract, and
// tests/ops/gemm_fixed_test.cpp holds them to it):
//   s = +0
//   for p = 0, 1, ..., k - 1 in this order:  s = fma(A(i, p), B(p, j), s)   (one rounding)
//   t = alpha * s                                                           (rounded)
//   C(i, j) = t                 when beta == 0 (C is not read, as in BLAS: NaN there is dropped)
//   C(i, j) = (beta * C(i, j)) + t   otherwise, the product and the sum each rounded
// So alpha == 1 and beta == 1 are exact special cases of the same formula, and an accumulating
// product (dw += dyᵀ·x) adds the finished sum to C once. The vector variants put output columns
// j in lanes, so each lane runs exactly the scalar sequence above; k is never split, and blocks
// and threads divide only the output (rows and column panels).
//
// Speed: register-blocked micro-kernels (AVX-512: 12 rows x 32 columns; AVX2: 6 x 16) over
// packed panels of op(B) (packed once per column block of up to 1 MiB, shared by the threads)
// and a packed block of op(A) rows per thread; about OpenBLAS's own AVX-512 and AVX2 kernels at
// the demo's shapes (docs/architecture.md has the figures).
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"

namespace sluice::kernels::cpu {

// threads: the team size (0 = omp_get_max_threads()); a product smaller than about half a
// million multiply-adds runs on the calling thread. Sizes must be >= 0 and the leading
// dimensions at least the rows they step over (lda >= k, or >= m when trans_a; likewise ldb,
// ldc >= n); a violation aborts (a caller error, as for the other op kernels).
void GemmFixed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc, int threads = 0);

// The variant GemmFixed runs now: the CPU's best ISA, capped by SLUICE_ISA or ForceIsa (which
// is how the tests compare the variants).
Isa GemmFixedIsa();

}  // namespace sluice::kernels::cpu
