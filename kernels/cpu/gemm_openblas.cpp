#include "kernels/cpu/gemm_openblas.h"

#include <cblas.h>
#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>
#include <mutex>
#include <optional>

#include "kernels/cpu/ops_parallel.h"

// Exported by every DYNAMIC_ARCH OpenBLAS (driver/others/dynamic.c): quit forgets the chosen
// core, init chooses again (OPENBLAS_CORETYPE if set, else its CPUID table) and sets the core's
// blocking parameters. Weak, so that a build for one core, which lacks them, still links.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace sluice::kernels::cpu {
namespace {

// The x86-64 cores Sluice would name, with the ISA of their SGEMM kernels and the symbol of
// their parameter table (present only where the build has the core).
struct KnownCore {
  const char* name;
  const char* table;
  Isa isa;
};
constexpr KnownCore kCores[] = {
    {"Prescott", "gotoblas_PRESCOTT", Isa::kScalar},
    {"Core2", "gotoblas_CORE2", Isa::kScalar},
    {"Nehalem", "gotoblas_NEHALEM", Isa::kScalar},
    {"Sandybridge", "gotoblas_SANDYBRIDGE", Isa::kScalar},  // AVX without FMA: below kAvx2
    {"Haswell", "gotoblas_HASWELL", Isa::kAvx2},
    {"Zen", "gotoblas_ZEN", Isa::kAvx2},
    {"SkylakeX", "gotoblas_SKYLAKEX", Isa::kAvx512},
    {"Cooperlake", "gotoblas_COOPERLAKE", Isa::kAvx512},
    {"SapphireRapids", "gotoblas_SAPPHIRERAPIDS", Isa::kAvx512},
};

const KnownCore* FindCore(std::string_view name) {
  for (const KnownCore& core : kCores) {
    if (name.size() == std::string_view(core.name).size() &&
        strncasecmp(name.data(), core.name, name.size()) == 0) {
      return &core;
    }
  }
  return nullptr;
}

bool IsDynamicArch() {
  return gotoblas_dynamic_init != nullptr && gotoblas_dynamic_quit != nullptr &&
         OpenBlasConfig().find("DYNAMIC_ARCH") != std::string::npos;
}

// Serialises core switches (a benchmark's, the settling one).
std::mutex switch_mutex;

OpenBlasCore Settle() {
  OpenBlasCore result;
  result.picked = OpenBlasCoreName();
  result.core = result.picked;
  if (const char* env = std::getenv("OPENBLAS_CORETYPE"); env != nullptr && *env != '\0') {
    result.reason = std::string("from OPENBLAS_CORETYPE=") + env;
    return result;
  }
  const Isa isa = SelectedIsa();
  const std::string_view want = OpenBlasCoreFor(isa);
  if (want.empty() || OpenBlasCoreIsa(result.picked) == isa) {
    result.reason = "picked by OpenBLAS";
    return result;
  }
  const std::string error = SwitchOpenBlasCore(want);
  result.core = OpenBlasCoreName();
  if (!error.empty()) {
    result.reason = "picked by OpenBLAS; setting " + std::string(want) + " failed: " + error;
  } else {
    result.reason = "set by Sluice for " + std::string(IsaName(isa)) + " (OpenBLAS picked " +
                    result.picked + ")";
  }
  return result;
}

}  // namespace

std::string_view OpenBlasCoreFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "SkylakeX";
    case Isa::kAvx2:
      return "Haswell";
    case Isa::kScalar:
      return "";
  }
  return "";
}

Isa OpenBlasCoreIsa(std::string_view core) {
  const KnownCore* known = FindCore(core);
  return known != nullptr ? known->isa : Isa::kScalar;
}

std::string SwitchOpenBlasCore(std::string_view core) {
  const KnownCore* known = FindCore(core);
  if (known == nullptr) return std::string(core).append(": not a core Sluice sets");
  const CpuFeatures& cpu = DetectCpuFeatures();
  if ((known->isa == Isa::kAvx512 && !cpu.avx512) || (known->isa == Isa::kAvx2 && !cpu.avx2)) {
    return std::string(known->name) + " needs " + std::string(IsaName(known->isa)) +
           ", which this CPU lacks";
  }
  if (!IsDynamicArch()) return "this OpenBLAS is not a DYNAMIC_ARCH build: it has one core";
  if (dlsym(RTLD_DEFAULT, known->table) == nullptr) {
    return "this OpenBLAS build has no " + std::string(known->name) + " core";
  }
  std::lock_guard<std::mutex> lock(switch_mutex);
  if (strcasecmp(OpenBlasCoreName().c_str(), known->name) == 0) return "";
  // OPENBLAS_CORETYPE only for the call that reads it: the environment stays the user's (child
  // processes choose for themselves).
  const char* previous = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> saved =
      previous != nullptr ? std::optional<std::string>(previous) : std::nullopt;
  setenv("OPENBLAS_CORETYPE", known->name, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  if (saved.has_value()) {
    setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
  } else {
    unsetenv("OPENBLAS_CORETYPE");
  }
  const std::string now = OpenBlasCoreName();
  if (strcasecmp(now.c_str(), known->name) != 0) {
    return "OpenBLAS runs " + now + " after being asked for " + known->name;
  }
  return "";
}

const OpenBlasCore& SettleOpenBlasCore() {
  static const OpenBlasCore* settled = new OpenBlasCore(Settle());
  return *settled;
}

std::string OpenBlasCoreName() {
  const char* core = openblas_get_corename();
  return core != nullptr ? core : "unknown";
}

std::string OpenBlasConfig() {
  const char* config = openblas_get_config();
  std::string text = config != nullptr ? config : "unknown";
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

std::string OpenBlasVersion() {
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the second word.
  const std::string config = OpenBlasConfig();
  std::string_view rest(config);
  constexpr std::string_view kPrefix = "OpenBLAS ";
  if (!rest.starts_with(kPrefix)) return "unknown";
  rest.remove_prefix(kPrefix.size());
  return std::string(rest.substr(0, rest.find(' ')));
}

void OpenBlasGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  SettleOpenBlasCore();
  if (k == 0) {  // an empty sum; cblas would reject the leading dimension 0 a caller may pass
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  const char* op = "Gemm";
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, internal::BlasInt(m, op),
              internal::BlasInt(n, op), internal::BlasInt(k, op), alpha, a,
              internal::BlasInt(lda, op), b, internal::BlasInt(ldb, op), beta, c,
              internal::BlasInt(ldc, op));
}

}  // namespace sluice::kernels::cpu
