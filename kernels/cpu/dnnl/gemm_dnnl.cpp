// kernels/cpu/gemm_dnnl.h with oneDNN: dnnl_sgemm, row-major like cblas_sgemm with CblasRowMajor.
#include "kernels/cpu/gemm_dnnl.h"

#include <dnnl.h>
#include <dnnl_debug.h>

#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace sluice::kernels::cpu {

bool DnnlBuilt() { return true; }

std::string DnnlVersion() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string DnnlIsa() {
  // "cpu_isa_avx512_core_amx" -> "avx512_core_amx"
  std::string isa = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
  constexpr std::string_view kPrefix = "cpu_isa_";
  if (isa.starts_with(kPrefix)) isa.erase(0, kPrefix.size());
  return isa;
}

std::string DnnlCapIsa(int isa_level) {
  const dnnl_cpu_isa_t cap = isa_level >= 2   ? dnnl_cpu_isa_all
                             : isa_level == 1 ? dnnl_cpu_isa_avx2
                                              : dnnl_cpu_isa_sse41;
  const dnnl_status_t status = dnnl_set_max_cpu_isa(cap);
  if (status == dnnl_success) return "";
  return std::string("dnnl_set_max_cpu_isa(") + dnnl_cpu_isa2str(cap) +
         "): " + dnnl_status2str(status) + " (it must come before oneDNN's first product)";
}

std::string DnnlGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                          a, lda, b, ldb, beta, c, ldc);
  if (status == dnnl_success) return "";
  return std::string("dnnl_sgemm: ") + dnnl_status2str(status);
}

namespace {

struct MatmulKey {
  bool bf16, trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  auto Tie() const { return std::tie(bf16, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta); }
  bool operator<(const MatmulKey& other) const { return Tie() < other.Tie(); }
};

// One cached product. With bf16, A and B are first converted (oneDNN reorders) into bf16
// buffers of the same layout that the entry owns, so one entry serves one call at a time
// (`busy`).
struct Matmul {
  dnnl::memory::desc a_md, b_md, c_md;    // the caller's fp32 operands
  dnnl::memory::desc a_mul_md, b_mul_md;  // what the matmul reads: fp32 or bf16
  dnnl::memory a_bf16, b_bf16;            // bf16 only: the converted operands
  dnnl::reorder to_bf16_a, to_bf16_b;     // bf16 only
  dnnl::matmul primitive;
  std::string impl;
  std::mutex busy;
};

struct MatmulCache {
  std::mutex mutex;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::map<MatmulKey, std::shared_ptr<Matmul>> primitives;
};

MatmulCache& Cache() {
  static MatmulCache* cache = new MatmulCache;
  return *cache;
}

std::shared_ptr<Matmul> MakeMatmul(const MatmulKey& key, const dnnl::engine& engine) {
  using dt = dnnl::memory::data_type;
  auto matmul = std::make_shared<Matmul>();
  // Row-major operands; a transpose is a swap of strides.
  matmul->a_md = dnnl::memory::desc(
      {key.m, key.k}, dt::f32,
      key.trans_a ? dnnl::memory::dims{1, key.lda} : dnnl::memory::dims{key.lda, 1});
  matmul->b_md = dnnl::memory::desc(
      {key.k, key.n}, dt::f32,
      key.trans_b ? dnnl::memory::dims{1, key.ldb} : dnnl::memory::dims{key.ldb, 1});
  matmul->c_md = dnnl::memory::desc({key.m, key.n}, dt::f32, dnnl::memory::dims{key.ldc, 1});
  matmul->a_mul_md = matmul->a_md;
  matmul->b_mul_md = matmul->b_md;
  if (key.bf16) {
    // oneDNN 2.6's matmul does not down-convert fp32 inputs itself (fpmath_mode bf16 leaves it on
    // fp32 kernels), so the inputs are converted here; the bf16 x bf16 -> fp32 product then runs
    // on AMX tiles where the CPU has them (impl "brg:avx512_core_amx").
    matmul->a_mul_md = dnnl::memory::desc(
        {key.m, key.k}, dt::bf16,
        key.trans_a ? dnnl::memory::dims{1, key.m} : dnnl::memory::dims{key.k, 1});
    matmul->b_mul_md = dnnl::memory::desc(
        {key.k, key.n}, dt::bf16,
        key.trans_b ? dnnl::memory::dims{1, key.k} : dnnl::memory::dims{key.n, 1});
    matmul->a_bf16 = dnnl::memory(matmul->a_mul_md, engine);
    matmul->b_bf16 = dnnl::memory(matmul->b_mul_md, engine);
    matmul->to_bf16_a = dnnl::reorder(
        dnnl::reorder::primitive_desc(engine, matmul->a_md, engine, matmul->a_mul_md));
    matmul->to_bf16_b = dnnl::reorder(
        dnnl::reorder::primitive_desc(engine, matmul->b_md, engine, matmul->b_mul_md));
  }
  dnnl::primitive_attr attr;
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {  // C = product + beta C; beta 0 leaves C unread, as BLAS does
    dnnl::post_ops post_ops;
    post_ops.append_sum(key.beta);
    attr.set_post_ops(post_ops);
  }
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(matmul->a_mul_md, matmul->b_mul_md, matmul->c_md), attr, engine);
  matmul->impl = pd.impl_info_str();
  matmul->primitive = dnnl::matmul(pd);
  return matmul;
}

}  // namespace

std::string DnnlMatmul(bool bf16, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                       float beta, float* c, int64_t ldc, std::string* impl) {
  const MatmulKey key{bf16, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta};
  MatmulCache& cache = Cache();
  try {
    std::shared_ptr<Matmul> matmul;
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      std::shared_ptr<Matmul>& slot = cache.primitives[key];
      if (slot == nullptr) slot = MakeMatmul(key, cache.engine);
      matmul = slot;
    }
    if (impl != nullptr) *impl = matmul->impl;
    std::lock_guard<std::mutex> busy(matmul->busy);
    dnnl::stream stream(cache.engine);
    dnnl::memory a_mem(matmul->a_md, cache.engine, const_cast<float*>(a));
    dnnl::memory b_mem(matmul->b_md, cache.engine, const_cast<float*>(b));
    if (bf16) {
      matmul->to_bf16_a.execute(stream, a_mem, matmul->a_bf16);
      matmul->to_bf16_b.execute(stream, b_mem, matmul->b_bf16);
    }
    matmul->primitive.execute(stream,
                              {{DNNL_ARG_SRC, bf16 ? matmul->a_bf16 : a_mem},
                               {DNNL_ARG_WEIGHTS, bf16 ? matmul->b_bf16 : b_mem},
                               {DNNL_ARG_DST, dnnl::memory(matmul->c_md, cache.engine, c)}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return std::string("oneDNN matmul") + (bf16 ? " (bf16 inputs)" : "") + ": " + e.what() + " (" +
           dnnl_status2str(e.status) + ")";
  }
  return "";
}

}  // namespace sluice::kernels::cpu
