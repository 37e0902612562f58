// The AVX-512 vector kernels of the CPU ops (16 lanes, masked tails): ops_vector_impl.h over
// the V below.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers self-initialize their "undefined" vectors and then warn about them
// (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include "kernels/cpu/ops_vector_impl.h"
#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu::internal {
namespace {

struct Avx512 {
  using R = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16;
  static Mask Lanes(int64_t n) { return static_cast<Mask>((1u << n) - 1u); }
  static R Load(const float* p) { return _mm512_loadu_ps(p); }
  static R LoadN(const float* p, int64_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), Lanes(n), p);
  }
  static void Store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static void StoreN(float* p, R v, int64_t n) { _mm512_mask_storeu_ps(p, Lanes(n), v); }
  static R Set1(float x) { return _mm512_set1_ps(x); }
  static R Add(R a, R b) { return _mm512_add_ps(a, b); }
  static R Sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R Mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R Div(R a, R b) { return _mm512_div_ps(a, b); }
  static R Max(R a, R b) { return _mm512_max_ps(a, b); }
  static R Fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  // By hand rather than _mm512_reduce_*_ps, and the 256-bit extracts, whose GCC 12
  // expansions warn of an uninitialized register.
  static float SumLanes(R v) {
    const __m256 h = _mm512_castps512_ps256(_mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float MaxLanes(R v) {
    const __m256 h = _mm512_castps512_ps256(_mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static Mask LanesBelow(int64_t limit) { return limit >= kLanes ? Mask(0xffff) : Lanes(limit); }
  static R Select(Mask m, R a, R b) { return _mm512_mask_blend_ps(m, b, a); }
  // Cephes' expf: 2^n * p(r), r = x - n ln 2 in two parts, a degree-5 polynomial.
  // Below ln(FLT_MIN) the result is 0, so that a masked score (-inf) has no weight.
  static R Exp(R x_in) {
    const R lo = _mm512_set1_ps(-87.3365478515625f);
    const Mask keep = _mm512_cmp_ps_mask(x_in, lo, _CMP_GE_OQ);
    R x = _mm512_min_ps(x_in, _mm512_set1_ps(88.3762626647949f));
    x = _mm512_max_ps(x, lo);
    const R n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    R y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(keep, y, _mm512_castsi512_ps(e));
  }
};

}  // namespace

const OpsVectorVariant& OpsVectorAvx512Variant() {
  static const OpsVectorVariant variant = MakeOpsVectorVariant<Avx512>(Isa::kAvx512);
  return variant;
}

}  // namespace sluice::kernels::cpu::internal
