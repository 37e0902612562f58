// Which code the CPU's non-GEMM ops run, chosen once per process like the GEMM (gemm.h):
//   kFixed   the loops the compiler vectorises for the x86-64 baseline (SSE2). Their bits do not
//            depend on the CPU's ISA or the thread count: stored results (tests/golden) come
//            from them, with GemmFixed;
//   kVector  hand-vectorised AVX-512 or AVX2 kernels (ops_vector_*.cpp, picked at run time by
//            CPUID, capped by SLUICE_ISA / ForceIsa) with a polynomial exp and wider sums, and a
//            tiled attention that never holds a [seq, seq] matrix. Their bits differ from
//            kFixed's and between the two ISAs; each is held to the scalar reference with a
//            declared tolerance (tests/ops/cpu_vector_ops_test.cpp).
// The trainer sets kVector where device.cpu_gemm is blas (the run has chosen speed over bits
// that hold on any CPU) and kFixed where it is deterministic. Ops whose vector form keeps the
// fixed loops' order of operations (RoPE, the embedding scatter-add, column sums) are not
// switched: both paths give the same bits.
#pragma once

#include <string>

#include "kernels/cpu/cpu_features.h"

namespace sluice::kernels::cpu {

enum class OpsPath { kFixed, kVector };

// Process-wide and atomic; default kFixed, as device.cpu_gemm's default is deterministic.
void SetOpsPath(OpsPath path);
OpsPath CurrentOpsPath();

// The ISA the vector kernels run now: the CPU's best capped by SLUICE_ISA / ForceIsa; kScalar
// where the CPU has neither AVX2 nor AVX-512 (kVector then runs the fixed loops).
Isa OpsVectorIsa();

// "fixed" or "vector avx512" / "vector avx2" ("vector (no AVX2: fixed)" on such a CPU), for
// `sluice env`, run summaries and benchmark records.
std::string OpsPathName(OpsPath path = CurrentOpsPath());

}  // namespace sluice::kernels::cpu
