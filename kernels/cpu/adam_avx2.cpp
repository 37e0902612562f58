// AVX2 + FMA + F16C variant (8 fp32 lanes). Compiled with -mavx2 -mfma -mf16c by file name;
// called only when CPUID reports them. Contraction into FMA is off: each lane rounds exactly like
// AdamUpdateElement, so the vector body and the scalar tail agree with the reference bit for bit.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/adam_internal.h"
#include "kernels/cpu/optimizer_avx2_internal.h"

namespace sluice::kernels::internal {
namespace {

using avx2::LoadGrad;
using avx2::Narrow;
using avx2::ToCopy;

template <bool kL2>
struct StepMath {
  explicit StepMath(const AdamStepConstants& c)
      : constants(c),
        grad_scale(_mm256_set1_ps(c.grad_scale)),
        l2_decay(_mm256_set1_ps(c.l2_decay)),
        param_decay(_mm256_set1_ps(c.param_decay)),
        beta1(_mm256_set1_ps(c.beta1)),
        one_minus_beta1(_mm256_set1_ps(c.one_minus_beta1)),
        beta2(_mm256_set1_ps(c.beta2)),
        one_minus_beta2(_mm256_set1_ps(c.one_minus_beta2)),
        eps(_mm256_set1_ps(c.eps)),
        step_size(_mm256_set1_ps(c.step_size)),
        bias_correction2_rsqrt(_mm256_set1_ps(c.bias_correction2_rsqrt)) {}

  // AdamUpdateElement, lane by lane, in the same order.
  inline void Update(__m256 g, __m256& p, __m256& m, __m256& v) const {
    g = _mm256_mul_ps(g, grad_scale);
    if constexpr (kL2) g = _mm256_add_ps(g, _mm256_mul_ps(l2_decay, p));
    p = _mm256_mul_ps(p, param_decay);
    m = _mm256_add_ps(_mm256_mul_ps(beta1, m), _mm256_mul_ps(one_minus_beta1, g));
    v = _mm256_add_ps(_mm256_mul_ps(beta2, v), _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), bias_correction2_rsqrt), eps);
    p = _mm256_sub_ps(p, _mm256_mul_ps(step_size, _mm256_div_ps(m, denom)));
  }
  template <AdamCopyType kCopy>
  inline __m256i Copy(__m256 low, __m256 high) const {
    return ToCopy<kCopy>(low, high);
  }
  inline void Element(const AdamTensors& t, AdamGradType grad, AdamCopyType copy, size_t i) const {
    StepElement(t, constants, grad, copy, i);
  }

  const AdamStepConstants& constants;
  const __m256 grad_scale, l2_decay, param_decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
      eps, step_size, bias_correction2_rsqrt;
};

struct ProbeMath {
  inline void Update(__m256 g, __m256& p, __m256& m, __m256& v) const {
    p = _mm256_add_ps(p, g);
    m = _mm256_add_ps(m, g);
    v = _mm256_add_ps(v, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), g));
  }
  template <AdamCopyType kCopy>
  inline __m256i Copy(__m256 low, __m256 high) const {
    return Narrow(_mm256_srli_epi32(_mm256_castps_si256(low), 16),
                  _mm256_srli_epi32(_mm256_castps_si256(high), 16));
  }
  inline void Element(const AdamTensors& t, AdamGradType grad, AdamCopyType copy, size_t i) const {
    ProbeElement(t, grad, copy, i);
  }
};

// One pass over the range: every byte of p, g, m, v read once, p, m, v and the copy written once.
// The copy is written with non-temporal stores in whole 64-byte lines (it is only read later, by
// the device DMA): that saves the read-for-ownership a normal store would cost. p, m and v were
// just read, so their lines are in cache and normal stores add no traffic.
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

  // Updates 8 elements in place; returns the new parameters for the copy.
  auto update = [&](size_t j) {
    __m256 pv = _mm256_loadu_ps(p + j);
    __m256 mv = _mm256_loadu_ps(m + j);
    __m256 vv = _mm256_loadu_ps(v + j);
    math.Update(LoadGrad<kGrad>(grads, j), pv, mv, vv);
    _mm256_storeu_ps(p + j, pv);
    _mm256_storeu_ps(m + j, mv);
    _mm256_storeu_ps(v + j, vv);
    return pv;
  };
  auto copy_at = [&](size_t j) { return reinterpret_cast<__m256i*>(copy + j); };

  if constexpr (kHasCopy) {
    // Scalar steps up to the copy's next 64-byte line, so the body writes whole aligned lines.
    uintptr_t misalignment = reinterpret_cast<uintptr_t>(copy) % 64;
    size_t head = std::min(n, misalignment == 0 ? size_t{0} : (64 - misalignment) / 2);
    for (; i < head; ++i) math.Element(t, kGrad, kCopy, i);
  }
  for (; i + 32 <= n; i += 32) {
    __m256 p0 = update(i);
    __m256 p1 = update(i + 8);
    __m256 p2 = update(i + 16);
    __m256 p3 = update(i + 24);
    if constexpr (kHasCopy) {
      _mm256_stream_si256(copy_at(i), math.template Copy<kCopy>(p0, p1));
      _mm256_stream_si256(copy_at(i + 16), math.template Copy<kCopy>(p2, p3));
    }
  }
  for (; i + 16 <= n; i += 16) {
    __m256 p0 = update(i);
    __m256 p1 = update(i + 8);
    if constexpr (kHasCopy) _mm256_storeu_si256(copy_at(i), math.template Copy<kCopy>(p0, p1));
  }
  for (; i < n; ++i) math.Element(t, kGrad, kCopy, i);
  if constexpr (kHasCopy) _mm_sfence();  // the stream stores are visible before we return
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

const AdamVariant& AdamAvx2Variant() {
  static constexpr AdamVariant kVariant{&Step, &Probe};
  return kVariant;
}

}  // namespace sluice::kernels::internal
