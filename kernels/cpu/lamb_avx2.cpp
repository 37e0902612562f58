// AVX2 + FMA + F16C variant of CPU LAMB (8 fp32 lanes). Compiled with -mavx2 -mfma -mf16c by file
// name; called only when CPUID reports them. Contraction into FMA is off: each lane rounds exactly
// like LambMomentsElement / LambApplyElement (sqrt and division are correctly rounded in both),
// and the squared sums go to the reference's lanes in the reference's order, so the results agree
// with the reference bit for bit.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/lamb_internal.h"
#include "kernels/cpu/optimizer_avx2_internal.h"

namespace sluice::kernels::internal {
namespace {

using avx2::LoadGrad;
using avx2::ToCopy;

struct Math {
  explicit Math(const LambStepConstants& c)
      : constants(c),
        grad_scale(_mm256_set1_ps(c.grad_scale)),
        beta1(_mm256_set1_ps(c.beta1)),
        one_minus_beta1(_mm256_set1_ps(c.one_minus_beta1)),
        beta2(_mm256_set1_ps(c.beta2)),
        one_minus_beta2(_mm256_set1_ps(c.one_minus_beta2)),
        eps(_mm256_set1_ps(c.eps)),
        weight_decay(_mm256_set1_ps(c.weight_decay)) {}

  // LambUpdateElement, lane by lane.
  inline __m256 Update(__m256 p, __m256 m, __m256 v) const {
    const __m256 denom = constants.eps_inside_sqrt ? _mm256_sqrt_ps(_mm256_add_ps(v, eps))
                                                   : _mm256_add_ps(_mm256_sqrt_ps(v), eps);
    return _mm256_add_ps(_mm256_div_ps(m, denom), _mm256_mul_ps(weight_decay, p));
  }
  // LambMomentsElement, lane by lane.
  inline __m256 Moments(__m256 g, __m256 p, __m256& m, __m256& v) const {
    g = _mm256_mul_ps(g, grad_scale);
    m = _mm256_add_ps(_mm256_mul_ps(beta1, m), _mm256_mul_ps(one_minus_beta1, g));
    v = _mm256_add_ps(_mm256_mul_ps(beta2, v), _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    return Update(p, m, v);
  }

  const LambStepConstants& constants;
  const __m256 grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
};

// acc_low += double(x[0..3])^2, acc_high += double(x[4..7])^2: lanes 0-7 of the reference.
inline void AddSquares(__m256 x, __m256d& acc_low, __m256d& acc_high) {
  const __m256d low = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
  const __m256d high = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  acc_low = _mm256_add_pd(acc_low, _mm256_mul_pd(low, low));
  acc_high = _mm256_add_pd(acc_high, _mm256_mul_pd(high, high));
}

template <AdamGradType kGrad>
void MomentsFor(const LambTensors& t, const Math& math, LambNormSums* block_sums) {
  float* const p = t.params;
  float* const m = t.exp_avg;
  float* const v = t.exp_avg_sq;
  const void* const grads = t.grads;
  for (size_t block = 0; block < t.count; block += kLambSumBlock) {
    const size_t end = std::min(t.count, block + kLambSumBlock);
    __m256d p_low = _mm256_setzero_pd(), p_high = _mm256_setzero_pd();
    __m256d u_low = _mm256_setzero_pd(), u_high = _mm256_setzero_pd();
    size_t i = block;
    for (; i + 8 <= end; i += 8) {
      const __m256 pv = _mm256_loadu_ps(p + i);
      __m256 mv = _mm256_loadu_ps(m + i);
      __m256 vv = _mm256_loadu_ps(v + i);
      const __m256 u = math.Moments(LoadGrad<kGrad>(grads, i), pv, mv, vv);
      _mm256_storeu_ps(m + i, mv);
      _mm256_storeu_ps(v + i, vv);
      AddSquares(pv, p_low, p_high);
      AddSquares(u, u_low, u_high);
    }
    alignas(32) double param_lanes[kLambSumLanes];
    alignas(32) double update_lanes[kLambSumLanes];
    _mm256_store_pd(param_lanes, p_low);
    _mm256_store_pd(param_lanes + 4, p_high);
    _mm256_store_pd(update_lanes, u_low);
    _mm256_store_pd(update_lanes + 4, u_high);
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

// p, m and v read once, p and the copy written once; the copy with non-temporal stores of whole
// 64-byte lines, as adam_avx2.cpp's.
template <AdamCopyType kCopy>
void ApplyFor(const LambTensors& t, const Math& math, float scale) {
  constexpr bool kHasCopy = kCopy != AdamCopyType::kNone;
  float* const p = t.params;
  const float* const m = t.exp_avg;
  const float* const v = t.exp_avg_sq;
  uint16_t* const copy = static_cast<uint16_t*>(t.param_copy);
  const size_t n = t.count;
  const __m256 scale_v = _mm256_set1_ps(scale);
  size_t i = 0;
  auto update = [&](size_t j) {
    const __m256 pv = _mm256_loadu_ps(p + j);
    const __m256 u = math.Update(pv, _mm256_loadu_ps(m + j), _mm256_loadu_ps(v + j));
    const __m256 next = _mm256_sub_ps(pv, _mm256_mul_ps(scale_v, u));
    _mm256_storeu_ps(p + j, next);
    return next;
  };
  auto copy_at = [&](size_t j) { return reinterpret_cast<__m256i*>(copy + j); };
  if constexpr (kHasCopy) {
    uintptr_t misalignment = reinterpret_cast<uintptr_t>(copy) % 64;
    size_t head = std::min(n, misalignment == 0 ? size_t{0} : (64 - misalignment) / 2);
    for (; i < head; ++i) LambApplyAt(t, math.constants, scale, kCopy, i);
  }
  for (; i + 32 <= n; i += 32) {
    __m256 p0 = update(i);
    __m256 p1 = update(i + 8);
    __m256 p2 = update(i + 16);
    __m256 p3 = update(i + 24);
    if constexpr (kHasCopy) {
      _mm256_stream_si256(copy_at(i), ToCopy<kCopy>(p0, p1));
      _mm256_stream_si256(copy_at(i + 16), ToCopy<kCopy>(p2, p3));
    }
  }
  for (; i + 16 <= n; i += 16) {
    __m256 p0 = update(i);
    __m256 p1 = update(i + 8);
    if constexpr (kHasCopy) _mm256_storeu_si256(copy_at(i), ToCopy<kCopy>(p0, p1));
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

const LambVariant& LambAvx2Variant() {
  static constexpr LambVariant kVariant{&Moments, &Apply};
  return kVariant;
}

}  // namespace sluice::kernels::internal
