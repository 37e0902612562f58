#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace sluice::kernels {
namespace {

uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

std::string ReadModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __get_cpuid(0, &eax, &ebx, &ecx, &edx);
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  f.vendor = vendor;
  f.model_name = ReadModelName();
  unsigned max_leaf = eax;

  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  bool osxsave = ecx & bit_OSXSAVE;
  bool fma = ecx & bit_FMA;
  bool f16c = ecx & bit_F16C;
  uint64_t xcr0 = osxsave ? ReadXcr0() : 0;
  bool ymm_os = (xcr0 & 0x6) == 0x6;
  bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  bool amx_os = (xcr0 & (3ull << 17)) == (3ull << 17);
  if (max_leaf < 7) return f;

  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = ymm_os && fma && f16c && (ebx & bit_AVX2);
  f.avx512 = zmm_os && f.avx2 && (ebx & bit_AVX512F) && (ebx & bit_AVX512BW) &&
             (ebx & bit_AVX512VL) && (ebx & bit_AVX512DQ);
  f.amx = amx_os && (edx & (1u << 24)) && (edx & (1u << 22));  // AMX-TILE, AMX-BF16
  unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
  __cpuid_count(7, 1, eax1, ebx1, ecx1, edx1);
  f.avx512_bf16 = f.avx512 && (eax1 & (1u << 5));
  return f;
}

std::atomic<int> forced_isa{-1};

Isa BestIsa() {
  const CpuFeatures& f = DetectCpuFeatures();
  if (f.avx512) return Isa::kAvx512;
  if (f.avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa EnvIsaCap() {
  const char* env = std::getenv("SLUICE_ISA");
  if (env == nullptr) return Isa::kAvx512;
  if (std::strcmp(env, "scalar") == 0) return Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) return Isa::kAvx2;
  return Isa::kAvx512;
}

}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

Isa SelectedIsa() {
  int cap = forced_isa.load();
  Isa limit = cap >= 0 ? static_cast<Isa>(cap) : EnvIsaCap();
  Isa best = BestIsa();
  return static_cast<int>(limit) < static_cast<int>(best) ? limit : best;
}

void ForceIsa(Isa isa) { forced_isa.store(static_cast<int>(isa)); }
void ClearForcedIsa() { forced_isa.store(-1); }

}  // namespace sluice::kernels
