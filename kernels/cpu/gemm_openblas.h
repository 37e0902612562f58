// OpenBLAS behind device.cpu_gemm: blas where oneDNN is not built (kernels/cpu/gemm.h), with its
// kernel family ("core") set for this CPU.
//
// Why Sluice sets the core: a DYNAMIC_ARCH OpenBLAS (Debian's) picks its core from a table of
// CPUID family/model numbers when the library loads, and a CPU newer than the library is not in
// it: Debian 12's 0.3.21 runs Sapphire and Emerald Rapids on its SSE3 "Prescott" core, 4-6x
// slower than its AVX-512 "SkylakeX" one. OPENBLAS_CORETYPE would choose another, but OpenBLAS
// reads it in its load-time constructor, before main, so setting it from Sluice would mean
// re-executing the process (and every rank mpirun starts). Instead, before the first OpenBLAS
// product, SettleOpenBlasCore() asks OpenBLAS to choose again with the core named: the
// library's own gotoblas_dynamic_quit() / gotoblas_dynamic_init() (exported by every DYNAMIC_ARCH
// build; the second reads OPENBLAS_CORETYPE, set only for that call), the same path its
// constructor takes. It applies only where the ISA of the core OpenBLAS picked differs from the
// one Sluice's own kernels use (the CPU's best, capped by SLUICE_ISA, so that an AVX2 machine can
// be emulated); OPENBLAS_CORETYPE in the environment always wins, and a build that is not
// DYNAMIC_ARCH keeps its one core.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/cpu/cpu_features.h"

namespace sluice::kernels::cpu {

struct OpenBlasCore {
  std::string picked;  // the core OpenBLAS chose as it loaded (openblas_get_corename())
  std::string core;    // the core it runs now
  // Why `core`: "picked by OpenBLAS", "from OPENBLAS_CORETYPE=...", "set by Sluice for avx512
  // (OpenBLAS picked Prescott)", or why it could not be set.
  std::string reason;
};

// Once per process, thread-safe; every OpenBLAS entry point in kernels/cpu calls it before the
// library runs a product. Must not race with a direct cblas call elsewhere (there is none).
const OpenBlasCore& SettleOpenBlasCore();

// The core an ISA level calls for: "SkylakeX" (avx512), "Haswell" (avx2), "" (scalar: whatever
// OpenBLAS picks).
std::string_view OpenBlasCoreFor(Isa isa);

// The ISA level a core's kernels use (Prescott, Nehalem: kScalar for Sluice's purposes).
Isa OpenBlasCoreIsa(std::string_view core);

// Makes OpenBLAS run `core` from now on (benchmarks time several cores in one process). Must not
// run while an OpenBLAS product does. Returns "" on success, else why not (unknown core name, not
// a DYNAMIC_ARCH build, the library ignored it).
std::string SwitchOpenBlasCore(std::string_view core);

// openblas_get_corename(), openblas_get_config() without its trailing space, and the version
// ("0.3.21") parsed from the config.
std::string OpenBlasCoreName();
std::string OpenBlasConfig();
std::string OpenBlasVersion();

// C = alpha op(A) op(B) + beta C, row-major (gemm_fixed.h's arguments), on OpenBLAS's own thread
// count (openblas_set_num_threads). k == 0 is handled here (cblas rejects a leading dimension of
// 0 a caller may pass).
void OpenBlasGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc);

}  // namespace sluice::kernels::cpu
