// AVX-512 variant (16 fp32 lanes; F, BW, VL, DQ). Compiled with the AVX-512 flags by file name;
// called only when CPUID reports them. Contraction into FMA is off: each lane rounds exactly like
// AdamUpdateElement, so the vector body and the scalar tail agree with the reference bit for bit.
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

#include "kernels/cpu/adam_internal.h"
#include "kernels/cpu/optimizer_avx512_internal.h"

namespace sluice::kernels::internal {
namespace {

using avx512::LoadGrad;
using avx512::ToCopy;
using avx512::UpperHalves;

template <bool kL2>
struct StepMath {
  explicit StepMath(const AdamStepConstants& c)
      : constants(c),
        grad_scale(_mm512_set1_ps(c.grad_scale)),
        l2_decay(_mm512_set1_ps(c.l2_decay)),
        param_decay(_mm512_set1_ps(c.param_decay)),
        beta1(_mm512_set1_ps(c.beta1)),
        one_minus_beta1(_mm512_set1_ps(c.one_minus_beta1)),
        beta2(_mm512_set1_ps(c.beta2)),
        one_minus_beta2(_mm512_set1_ps(c.one_minus_beta2)),
        eps(_mm512_set1_ps(c.eps)),
        step_size(_mm512_set1_ps(c.step_size)),
        bias_correction2_rsqrt(_mm512_set1_ps(c.bias_correction2_rsqrt)) {}

  // AdamUpdateElement, lane by lane, in the same order.
  inline void Update(__m512 g, __m512& p, __m512& m, __m512& v) const {
    g = _mm512_mul_ps(g, grad_scale);
    if constexpr (kL2) g = _mm512_add_ps(g, _mm512_mul_ps(l2_decay, p));
    p = _mm512_mul_ps(p, param_decay);
    m = _mm512_add_ps(_mm512_mul_ps(beta1, m), _mm512_mul_ps(one_minus_beta1, g));
    v = _mm512_add_ps(_mm512_mul_ps(beta2, v), _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), bias_correction2_rsqrt), eps);
    p = _mm512_sub_ps(p, _mm512_mul_ps(step_size, _mm512_div_ps(m, denom)));
  }
  template <AdamCopyType kCopy>
  inline __m512i Copy(__m512 low, __m512 high) const {
    return ToCopy<kCopy>(low, high);
  }
  inline void Element(const AdamTensors& t, AdamGradType grad, AdamCopyType copy, size_t i) const {
    StepElement(t, constants, grad, copy, i);
  }

  const AdamStepConstants& constants;
  const __m512 grad_scale, l2_decay, param_decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
      eps, step_size, bias_correction2_rsqrt;
};

struct ProbeMath {
  inline void Update(__m512 g, __m512& p, __m512& m, __m512& v) const {
    p = _mm512_add_ps(p, g);
    m = _mm512_add_ps(m, g);
    v = _mm512_add_ps(v, _mm512_abs_ps(g));
  }
  template <AdamCopyType kCopy>
  inline __m512i Copy(__m512 low, __m512 high) const {
    return UpperHalves(_mm512_castps_si512(low), _mm512_castps_si512(high));
  }
  inline void Element(const AdamTensors& t, AdamGradType grad, AdamCopyType copy, size_t i) const {
    ProbeElement(t, grad, copy, i);
  }
};

// One pass, as in adam_avx2.cpp: the copy goes out with non-temporal stores of whole 64-byte
// lines (32 elements each); p, m, v are stored normally into lines just read.
template <AdamGradType kGrad, AdamCopyType kCopy, typename Math>
void Stream(const AdamTensors& t, const Math& math) {
  constexpr bool kHasCopy = kCopy != AdamCopyType::kNone;
  // Locals, not t's fields: the copy's integer stores could alias t, forcing reloads.
  float* const p = t.params;
  float* const m = t.exp_avg;
  float* const v = t.exp_avg_sq;
  const void* const grads = t.grads;
  uint16_t* const copy = static_cast<uint16_t*>(t.param_copy);
  const size_t n = t.count;
  size_t i = 0;

  auto vector_at = [&](size_t j) {
    __m512 pv = _mm512_loadu_ps(p + j);
    __m512 mv = _mm512_loadu_ps(m + j);
    __m512 vv = _mm512_loadu_ps(v + j);
    math.Update(LoadGrad<kGrad>(grads, j), pv, mv, vv);
    _mm512_storeu_ps(p + j, pv);
    _mm512_storeu_ps(m + j, mv);
    _mm512_storeu_ps(v + j, vv);
    return pv;
  };

  if constexpr (kHasCopy) {
    uintptr_t misalignment = reinterpret_cast<uintptr_t>(copy) % 64;
    size_t head = std::min(n, misalignment == 0 ? size_t{0} : (64 - misalignment) / 2);
    for (; i < head; ++i) math.Element(t, kGrad, kCopy, i);
  }
  for (; i + 32 <= n; i += 32) {
    const __m512 low = vector_at(i);
    const __m512 high = vector_at(i + 16);
    if constexpr (kHasCopy) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(copy + i),
                          math.template Copy<kCopy>(low, high));
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 pv = vector_at(i);
    if constexpr (kHasCopy) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(copy + i),
                          _mm512_castsi512_si256(math.template Copy<kCopy>(pv, pv)));
    }
  }
  for (; i < n; ++i) math.Element(t, kGrad, kCopy, i);
  if constexpr (kHasCopy) _mm_sfence();
}

void Step(const AdamTensors& t, const AdamStepConstants& c) {
  VisitAdamTypes(t.grad_type, t.copy_type, [&]<AdamGradType kGrad, AdamCopyType kCopy>() {
    if (c.l2_decay != 0.0f) {
      Stream<kGrad, kCopy>(t, StepMath<true>(c));
    } else {
      Stream<kGrad, kCopy>(t, StepMath<false>(c));
    }
  });
}

void Probe(const AdamTensors& t) {
  VisitAdamTypes(t.grad_type, t.copy_type, [&]<AdamGradType kGrad, AdamCopyType kCopy>() {
    Stream<kGrad, kCopy>(t, ProbeMath());
  });
}

}  // namespace

const AdamVariant& AdamAvx512Variant() {
  static constexpr AdamVariant kVariant{&Step, &Probe};
  return kVariant;
}

}  // namespace sluice::kernels::internal
