#include "benchmarks/lib/cpu_gemm_blis.h"

#include <dlfcn.h>

#include <mutex>

#include "runtime/check.h"

namespace sluice::bench {
namespace {

// BLIS's typed API (blis.h), with its 64-bit dim_t and inc_t; trans_t 0 is BLIS_NO_TRANSPOSE.
using BliSgemm = void (*)(int transa, int transb, int64_t m, int64_t n, int64_t k,
                          const float* alpha, const float* a, int64_t rsa, int64_t csa,
                          const float* b, int64_t rsb, int64_t csb, const float* beta, float* c,
                          int64_t rsc, int64_t csc);
using BliSetThreads = void (*)(int64_t);
using BliVersion = const char* (*)();
using BliArchId = int (*)();
using BliArchString = const char* (*)(int);

struct Blis {
  std::string error;
  std::string library;
  BliSgemm sgemm = nullptr;
  BliSetThreads set_threads = nullptr;
  BliVersion version = nullptr;
  BliArchId arch_id = nullptr;
  BliArchString arch_string = nullptr;
};

// Debian's OpenMP build first (its threads are libgomp's, as the engine's), then whatever
// libblis.so.4 the alternatives point at.
constexpr const char* kLibraries[] = {
    "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4",
    "libblis.so.4",
};

const Blis& Load() {
  static const Blis* blis = [] {
    auto* b = new Blis;
    void* handle = nullptr;
    for (const char* name : kLibraries) {
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        b->library = name;
        break;
      }
    }
    if (handle == nullptr) {
      b->error =
          "BLIS not found (libblis.so.4: Debian package libblis4-openmp, which "
          "scripts/install-deps.sh installs)";
      return b;
    }
    b->sgemm = reinterpret_cast<BliSgemm>(dlsym(handle, "bli_sgemm"));
    b->set_threads = reinterpret_cast<BliSetThreads>(dlsym(handle, "bli_thread_set_num_threads"));
    b->version = reinterpret_cast<BliVersion>(dlsym(handle, "bli_info_get_version_str"));
    b->arch_id = reinterpret_cast<BliArchId>(dlsym(handle, "bli_arch_query_id"));
    b->arch_string = reinterpret_cast<BliArchString>(dlsym(handle, "bli_arch_string"));
    if (b->sgemm == nullptr || b->set_threads == nullptr || b->version == nullptr ||
        b->arch_id == nullptr || b->arch_string == nullptr) {
      b->error = b->library + " lacks bli_sgemm or another symbol of BLIS 0.9's API";
    }
    return b;
  }();
  return *blis;
}

}  // namespace

std::string BlisLoad() { return Load().error; }

std::string BlisDescription() {
  const Blis& b = Load();
  SLUICE_CHECK(b.error.empty()) << b.error;
  const bool openmp = b.library.find("openmp") != std::string::npos;
  return std::string("BLIS ") + b.version() + " " + b.arch_string(b.arch_id()) + " (" + b.library +
         (openmp ? ", OpenMP)" : ")");
}

void BlisSetThreads(int threads) {
  const Blis& b = Load();
  SLUICE_CHECK(b.error.empty()) << b.error;
  b.set_threads(threads);
}

void BlisGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  const Blis& blis = Load();
  SLUICE_CHECK(blis.error.empty()) << blis.error;
  // op(A)(i, p) = a[i * lda + p], or a[p * lda + i] transposed: row and column strides.
  const int64_t rsa = trans_a ? 1 : lda, csa = trans_a ? lda : 1;
  const int64_t rsb = trans_b ? 1 : ldb, csb = trans_b ? ldb : 1;
  blis.sgemm(0, 0, m, n, k, &alpha, a, rsa, csa, b, rsb, csb, &beta, c, ldc, 1);
}

}  // namespace sluice::bench
