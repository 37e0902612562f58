// AVX2 + FMA + F16C variant of CPU Lion (8 fp32 lanes). Compiled with -mavx2 -mfma -mf16c by file
// name; called only when CPUID reports them. Contraction into FMA is off: each lane rounds exactly
// like LionUpdateElement, so the vector body and the scalar tail agree with the reference bit for
// bit.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/lion_internal.h"
#include "kernels/cpu/optimizer_avx2_internal.h"

namespace sluice::kernels::internal {
namespace {

using avx2::LoadGrad;
using avx2::ToCopy;

struct StepMath {
  explicit StepMath(const LionStepConstants& c)
      : constants(c),
        grad_scale(_mm256_set1_ps(c.grad_scale)),
        param_decay(_mm256_set1_ps(c.param_decay)),
        beta1(_mm256_set1_ps(c.beta1)),
        one_minus_beta1(_mm256_set1_ps(c.one_minus_beta1)),
        beta2(_mm256_set1_ps(c.beta2)),
        one_minus_beta2(_mm256_set1_ps(c.one_minus_beta2)),
        lr(_mm256_set1_ps(c.lr)),
        minus_lr(_mm256_set1_ps(-c.lr)) {}

  // LionUpdateElement, lane by lane, in the same order; LionSignedStep by compares and masks.
  inline void Update(__m256 g, __m256& p, __m256& m) const {
    const __m256 zero = _mm256_setzero_ps();
    g = _mm256_mul_ps(g, grad_scale);
    p = _mm256_mul_ps(p, param_decay);
    const __m256 direction =
        _mm256_add_ps(_mm256_mul_ps(beta1, m), _mm256_mul_ps(one_minus_beta1, g));
    const __m256 positive = _mm256_cmp_ps(direction, zero, _CMP_GT_OQ);
    const __m256 negative = _mm256_cmp_ps(direction, zero, _CMP_LT_OQ);
    const __m256 nan = _mm256_cmp_ps(direction, direction, _CMP_UNORD_Q);
    __m256 step = _mm256_or_ps(_mm256_and_ps(positive, lr), _mm256_and_ps(negative, minus_lr));
    step = _mm256_blendv_ps(step, direction, nan);
    p = _mm256_sub_ps(p, step);
    m = _mm256_add_ps(_mm256_mul_ps(beta2, m), _mm256_mul_ps(one_minus_beta2, g));
  }
  inline void Element(const LionTensors& t, AdamGradType grad, AdamCopyType copy, size_t i) const {
    LionStepElement(t, constants, grad, copy, i);
  }

  const LionStepConstants& constants;
  const __m256 grad_scale, param_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, lr,
      minus_lr;
};

// One pass over the range, as adam_avx2.cpp's: every byte of p, g, m read once, p, m and the copy
// written once; the copy with non-temporal stores of whole 64-byte lines (only the device DMA
// reads it later), p and m with normal stores into lines just read.
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

  // Updates 8 elements in place; returns the new parameters for the copy.
  auto update = [&](size_t j) {
    __m256 pv = _mm256_loadu_ps(p + j);
    __m256 mv = _mm256_loadu_ps(m + j);
    math.Update(LoadGrad<kGrad>(grads, j), pv, mv);
    _mm256_storeu_ps(p + j, pv);
    _mm256_storeu_ps(m + j, mv);
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
      _mm256_stream_si256(copy_at(i), ToCopy<kCopy>(p0, p1));
      _mm256_stream_si256(copy_at(i + 16), ToCopy<kCopy>(p2, p3));
    }
  }
  for (; i + 16 <= n; i += 16) {
    __m256 p0 = update(i);
    __m256 p1 = update(i + 8);
    if constexpr (kHasCopy) _mm256_storeu_si256(copy_at(i), ToCopy<kCopy>(p0, p1));
  }
  for (; i < n; ++i) math.Element(t, kGrad, kCopy, i);
  if constexpr (kHasCopy) _mm_sfence();  // the stream stores are visible before we return
}

void Step(const LionTensors& t, const LionStepConstants& c) {
  VisitAdamTypes(t.grad_type, t.copy_type, [&]<AdamGradType kGrad, AdamCopyType kCopy>() {
    Stream<kGrad, kCopy>(t, StepMath(c));
  });
}

}  // namespace

const LionVariant& LionAvx2Variant() {
  static constexpr LionVariant kVariant{&Step};
  return kVariant;
}

}  // namespace sluice::kernels::internal
