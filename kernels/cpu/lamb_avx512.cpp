// AVX-512 variant of CPU LAMB (16 fp32 lanes; F, BW, VL, DQ). Compiled with the AVX-512 flags by
// file name; called only when CPUID reports them. Contraction into FMA is off: each lane rounds
// exactly like LambMomentsElement / LambApplyElement, and the squared sums go to the reference's
// lanes in the reference's order (elements k and k + 8 of a vector both to lane k, in that order),
// so the results agree with the reference bit for bit.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 headers self-initialize their "undefined" vectors and then warn about them
// (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/lamb_internal.h"
#include "kernels/cpu/optimizer_avx512_internal.h"

namespace sluice::kernels::internal {
namespace {

using avx512::LoadGrad;
using avx512::ToCopy;

struct Math {
  explicit Math(const LambStepConstants& c)
      : constants(c),
        grad_scale(_mm512_set1_ps(c.grad_scale)),
        beta1(_mm512_set1_ps(c.beta1)),
        one_minus_beta1(_mm512_set1_ps(c.one_minus_beta1)),
        beta2(_mm512_set1_ps(c.beta2)),
        one_minus_beta2(_mm512_set1_ps(c.one_minus_beta2)),
        eps(_mm512_set1_ps(c.eps)),
        weight_decay(_mm512_set1_ps(c.weight_decay)) {}

  inline __m512 Update(__m512 p, __m512 m, __m512 v) const {
    const __m512 denom = constants.eps_inside_sqrt ? _mm512_sqrt_ps(_mm512_add_ps(v, eps))
                                                   : _mm512_add_ps(_mm512_sqrt_ps(v), eps);
    return _mm512_add_ps(_mm512_div_ps(m, denom), _mm512_mul_ps(weight_decay, p));
  }
  inline __m512 Moments(__m512 g, __m512 p, __m512& m, __m512& v) const {
    g = _mm512_mul_ps(g, grad_scale);
    m = _mm512_add_ps(_mm512_mul_ps(beta1, m), _mm512_mul_ps(one_minus_beta1, g));
    v = _mm512_add_ps(_mm512_mul_ps(beta2, v), _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    return Update(p, m, v);
  }

  const LambStepConstants& constants;
  const __m512 grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
};

// acc += double(x[0..7])^2, then acc += double(x[8..15])^2.
inline void AddSquares(__m512 x, __m512d& acc) {
  const __m512d low = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  const __m512d high = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
  acc = _mm512_add_pd(acc, _mm512_mul_pd(low, low));
  acc = _mm512_add_pd(acc, _mm512_mul_pd(high, high));
}

template <AdamGradType kGrad>
void MomentsFor(const LambTensors& t, const Math& math, LambNormSums* block_sums) {
  float* const p = t.params;
  float* const m = t.exp_avg;
  float* const v = t.exp_avg_sq;
  const void* const grads = t.grads;
  for (size_t block = 0; block < t.count; block += kLambSumBlock) {
    const size_t end = std::min(t.count, block + kLambSumBlock);
    __m512d p_acc = _mm512_setzero_pd();
    __m512d u_acc = _mm512_setzero_pd();
    size_t i = block;
    for (; i + 16 <= end; i += 16) {
      const __m512 pv = _mm512_loadu_ps(p + i);
      __m512 mv = _mm512_loadu_ps(m + i);
      __m512 vv = _mm512_loadu_ps(v + i);
      const __m512 u = math.Moments(LoadGrad<kGrad>(grads, i), pv, mv, vv);
      _mm512_storeu_ps(m + i, mv);
      _mm512_storeu_ps(v + i, vv);
      AddSquares(pv, p_acc);
      AddSquares(u, u_acc);
    }
    alignas(64) double param_lanes[kLambSumLanes];
    alignas(64) double update_lanes[kLambSumLanes];
    _mm512_store_pd(param_lanes, p_acc);
    _mm512_store_pd(update_lanes, u_acc);
    for (; i < end; ++i) {
      LambMomentsLane(t, math.constants, kGrad, block, i, param_lanes, update_lanes);
    }
    *block_sums++ = {LambLaneSum(param_lanes), LambLaneSum(update_lanes)};
  }
}

void Moments(const LambTensors& t, const LambStepConstants& c, LambNormSums* block_sums) {
  const Math math(c);
  switch (t.grad_type) {
    case AdamGradType::kF32:
      return MomentsFor<AdamGradType::kF32>(t, math, block_sums);
    case AdamGradType::kBF16:
      return MomentsFor<AdamGradType::kBF16>(t, math, block_sums);
    case AdamGradType::kF16:
      return MomentsFor<AdamGradType::kF16>(t, math, block_sums);
  }
}

template <AdamCopyType kCopy>
void ApplyFor(const LambTensors& t, const Math& math, float scale) {
  constexpr bool kHasCopy = kCopy != AdamCopyType::kNone;
  float* const p = t.params;
  const float* const m = t.exp_avg;
  const float* const v = t.exp_avg_sq;
  uint16_t* const copy = static_cast<uint16_t*>(t.param_copy);
  const size_t n = t.count;
  const __m512 scale_v = _mm512_set1_ps(scale);
  size_t i = 0;
  auto vector_at = [&](size_t j) {
    const __m512 pv = _mm512_loadu_ps(p + j);
    const __m512 u = math.Update(pv, _mm512_loadu_ps(m + j), _mm512_loadu_ps(v + j));
    const __m512 next = _mm512_sub_ps(pv, _mm512_mul_ps(scale_v, u));
    _mm512_storeu_ps(p + j, next);
    return next;
  };
  if constexpr (kHasCopy) {
    uintptr_t misalignment = reinterpret_cast<uintptr_t>(copy) % 64;
    size_t head = std::min(n, misalignment == 0 ? size_t{0} : (64 - misalignment) / 2);
    for (; i < head; ++i) LambApplyAt(t, math.constants, scale, kCopy, i);
  }
  for (; i + 32 <= n; i += 32) {
    const __m512 low = vector_at(i);
    const __m512 high = vector_at(i + 16);
    if constexpr (kHasCopy) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(copy + i), ToCopy<kCopy>(low, high));
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 pv = vector_at(i);
    if constexpr (kHasCopy) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(copy + i),
                          _mm512_castsi512_si256(ToCopy<kCopy>(pv, pv)));
    }
  }
  for (; i < n; ++i) LambApplyAt(t, math.constants, scale, kCopy, i);
  if constexpr (kHasCopy) _mm_sfence();
}

void Apply(const LambTensors& t, const LambStepConstants& c, float scale) {
  const Math math(c);
  switch (t.copy_type) {
    case AdamCopyType::kNone:
      return ApplyFor<AdamCopyType::kNone>(t, math, scale);
    case AdamCopyType::kBF16:
      return ApplyFor<AdamCopyType::kBF16>(t, math, scale);
    case AdamCopyType::kF16:
      return ApplyFor<AdamCopyType::kF16>(t, math, scale);
  }
}

}  // namespace

const LambVariant& LambAvx512Variant() {
  static constexpr LambVariant kVariant{&Moments, &Apply};
  return kVariant;
}

}  // namespace sluice::kernels::internal
