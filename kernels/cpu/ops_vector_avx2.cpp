// The AVX2 vector kernels of the CPU ops (8 lanes, tails through maskload / maskstore):
// ops_vector_impl.h over the V below.
#include <immintrin.h>

#include "kernels/cpu/ops_vector_impl.h"
#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu::internal {
namespace {

alignas(32) constexpr int32_t kLaneIndex[8] = {0, 1, 2, 3, 4, 5, 6, 7};

struct Avx2 {
  using R = __m256;
  using Mask = __m256;
  static constexpr int kLanes = 8;
  // Lane i all ones where i < n.
  static __m256i Lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_load_si256(reinterpret_cast<const __m256i*>(kLaneIndex)));
  }
  static R Load(const float* p) { return _mm256_loadu_ps(p); }
  static R LoadN(const float* p, int64_t n, float fill) {
    const __m256i m = Lanes(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void Store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static void StoreN(float* p, R v, int64_t n) { _mm256_maskstore_ps(p, Lanes(n), v); }
  static R Set1(float x) { return _mm256_set1_ps(x); }
  static R Add(R a, R b) { return _mm256_add_ps(a, b); }
  static R Sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R Mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R Div(R a, R b) { return _mm256_div_ps(a, b); }
  static R Max(R a, R b) { return _mm256_max_ps(a, b); }
  static R Fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static float SumLanes(R v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float MaxLanes(R v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static Mask LanesBelow(int64_t limit) {
    return _mm256_castsi256_ps(Lanes(limit >= kLanes ? kLanes : limit));
  }
  static R Select(Mask m, R a, R b) { return _mm256_blendv_ps(b, a, m); }
  // Cephes' expf, as in ops_vector_avx512.cpp.
  static R Exp(R x_in) {
    const R lo = _mm256_set1_ps(-87.3365478515625f);
    const R keep = _mm256_cmp_ps(x_in, lo, _CMP_GE_OQ);
    R x = _mm256_min_ps(x_in, _mm256_set1_ps(88.3762626647949f));
    x = _mm256_max_ps(x, lo);
    const R n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    R y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
  }
};

}  // namespace

const OpsVectorVariant& OpsVectorAvx2Variant() {
  static const OpsVectorVariant variant = MakeOpsVectorVariant<Avx2>(Isa::kAvx2);
  return variant;
}

}  // namespace sluice::kernels::cpu::internal
