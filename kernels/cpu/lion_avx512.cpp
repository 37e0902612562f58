// AVX-512 variant of CPU Lion (16 fp32 lanes; F, BW, VL, DQ). Compiled with the AVX-512 flags by
// file name; called only when CPUID reports them. Contraction into FMA is off: each lane rounds
// exactly like LionUpdateElement, so the vector body and the scalar tail agree with the reference
// bit for bit.
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

#include "kernels/cpu/lion_internal.h"
#include "kernels/cpu/optimizer_avx512_internal.h"

namespace sluice::kernels::internal {
namespace {

using avx512::LoadGrad;
using avx512::ToCopy;

struct StepMath {
  explicit StepMath(const LionStepConstants& c)
      : constants(c),
        grad_scale(_mm512_set1_ps(c.grad_scale)),
        param_decay(_mm512_set1_ps(c.param_decay)),
        beta1(_mm512_set1_ps(c.beta1)),
        one_minus_beta1(_mm512_set1_ps(c.one_minus_beta1)),
        beta2(_mm512_set1_ps(c.beta2)),
        one_minus_beta2(_mm512_set1_ps(c.one_minus_beta2)),
        lr(_mm512_set1_ps(c.lr)),
        minus_lr(_mm512_set1_ps(-c.lr)) {}

  // LionUpdateElement, lane by lane, in the same order; LionSignedStep by compare masks.
  inline void Update(__m512 g, __m512& p, __m512& m) const {
    const __m512 zero = _mm512_setzero_ps();
    g = _mm512_mul_ps(g, grad_scale);
    p = _mm512_mul_ps(p, param_decay);
    const __m512 direction =
        _mm512_add_ps(_mm512_mul_ps(beta1, m), _mm512_mul_ps(one_minus_beta1, g));
    const __mmask16 positive = _mm512_cmp_ps_mask(direction, zero, _CMP_GT_OQ);
    const __mmask16 negative = _mm512_cmp_ps_mask(direction, zero, _CMP_LT_OQ);
    const __mmask16 nan = _mm512_cmp_ps_mask(direction, direction, _CMP_UNORD_Q);
    __m512 step = _mm512_mask_blend_ps(positive, zero, lr);
    step = _mm512_mask_blend_ps(negative, step, minus_lr);
    step = _mm512_mask_blend_ps(nan, step, direction);
    p = _mm512_sub_ps(p, step);
    m = _mm512_add_ps(_mm512_mul_ps(beta2, m), _mm512_mul_ps(one_minus_beta2, g));
  }
  inline void Element(const LionTensors& t, AdamGradType grad, AdamCopyType copy, size_t i) const {
    LionStepElement(t, constants, grad, copy, i);
  }

  const LionStepConstants& constants;
  const __m512 grad_scale, param_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, lr,
      minus_lr;
};

// One pass, as in adam_avx512.cpp: the copy goes out with non-temporal stores of whole 64-byte
// lines (32 elements each); p and m are stored normally into lines just read.
template <AdamGradType kGrad, AdamCopyType kCopy>
void Stream(const LionTensors& t, const StepMath& math) {
  constexpr bool kHasCopy = kCopy != AdamCopyType::kNone;
  // Locals, not t's fields: the copy's integer stores could alias t, forcing reloads.
  float* const p = t.params;
  float* const m = t.exp_avg;
  const void* const grads = t.grads;
  uint16_t* const copy = static_cast<uint16_t*>(t.param_copy);
  const size_t n = t.count;
  size_t i = 0;

  auto vector_at = [&](size_t j) {
    __m512 pv = _mm512_loadu_ps(p + j);
    __m512 mv = _mm512_loadu_ps(m + j);
    math.Update(LoadGrad<kGrad>(grads, j), pv, mv);
    _mm512_storeu_ps(p + j, pv);
    _mm512_storeu_ps(m + j, mv);
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
  for (; i < n; ++i) math.Element(t, kGrad, kCopy, i);
  if constexpr (kHasCopy) _mm_sfence();
}

void Step(const LionTensors& t, const LionStepConstants& c) {
  VisitAdamTypes(t.grad_type, t.copy_type, [&]<AdamGradType kGrad, AdamCopyType kCopy>() {
    Stream<kGrad, kCopy>(t, StepMath(c));
  });
}

}  // namespace

const LionVariant& LionAvx512Variant() {
  static constexpr LionVariant kVariant{&Step};
  return kVariant;
}

}  // namespace sluice::kernels::internal
