// CPU instruction-set detection by CPUID (and XGETBV for OS support of the wider registers).
// Kernels choose their variant from this at run time; tests can force a lower ISA.
#pragma once

#include <string>
#include <string_view>

namespace sluice::kernels {

struct CpuFeatures {
  std::string vendor;
  std::string model_name;
  bool avx2 = false;       // with FMA and F16C
  bool avx512 = false;     // F, BW, VL, DQ and OS-enabled ZMM state
  bool avx512_bf16 = false;
  bool amx = false;        // AMX-TILE with AMX-BF16, OS-enabled
};

const CpuFeatures& DetectCpuFeatures();

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view IsaName(Isa isa);
// The best ISA this CPU supports, lowered by SLUICE_ISA (scalar|avx2|avx512) or ForceIsa().
Isa SelectedIsa();
// Caps the ISA for tests and benchmarks; asking for more than the CPU has keeps the CPU's best.
void ForceIsa(Isa isa);
void ClearForcedIsa();

}  // namespace sluice::kernels
