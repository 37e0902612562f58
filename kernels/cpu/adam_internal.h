// Shared by the CPU Adam dispatcher and its per-ISA files: each ISA file (adam_scalar.cpp,
// adam_avx2.cpp, adam_avx512.cpp) exports one AdamVariant; adam.cpp picks one by CPUID.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/ref/adam_ref.h"

namespace sluice::kernels::internal {

struct AdamVariant {
  // The update over one thread's contiguous range.
  void (*step)(const AdamTensors& t, const AdamStepConstants& c);
  // The memory probe over one range: the step's exact loads and stores (non-temporal where the
  // step's are) with trivial arithmetic: p += g, m += g, v += |g| (v stays >= 0, so the steps
  // timed between probes never see NaN), copy = upper half of p's bits.
  void (*probe)(const AdamTensors& t);
};

const AdamVariant& AdamScalarVariant();
const AdamVariant& AdamAvx2Variant();
const AdamVariant& AdamAvx512Variant();

// Calls fn.template operator()<kGrad, kCopy>() for the runtime pair (grad, copy), so each ISA
// file instantiates its loop once per dtype combination.
template <typename Fn>
void VisitAdamTypes(AdamGradType grad, AdamCopyType copy, Fn&& fn) {
  auto with_grad = [&]<AdamGradType kGrad>() {
    switch (copy) {
      case AdamCopyType::kNone:
        return fn.template operator()<kGrad, AdamCopyType::kNone>();
      case AdamCopyType::kBF16:
        return fn.template operator()<kGrad, AdamCopyType::kBF16>();
      case AdamCopyType::kF16:
        return fn.template operator()<kGrad, AdamCopyType::kF16>();
    }
  };
  switch (grad) {
    case AdamGradType::kF32:
      return with_grad.template operator()<AdamGradType::kF32>();
    case AdamGradType::kBF16:
      return with_grad.template operator()<AdamGradType::kBF16>();
    case AdamGradType::kF16:
      return with_grad.template operator()<AdamGradType::kF16>();
  }
}

// The probe's scalar element, shared by every variant's tail.
inline void ProbeElement(const AdamTensors& t, AdamGradType grad_type, AdamCopyType copy_type,
                         size_t i) {
  float g = LoadGradElement(t.grads, grad_type, i);
  float p = t.params[i] + g;
  t.params[i] = p;
  t.exp_avg[i] = t.exp_avg[i] + g;
  t.exp_avg_sq[i] = t.exp_avg_sq[i] + std::fabs(g);
  if (copy_type != AdamCopyType::kNone) {
    static_cast<uint16_t*>(t.param_copy)[i] =
        static_cast<uint16_t>(std::bit_cast<uint32_t>(p) >> 16);
  }
}

// The step's scalar element, shared by every variant's tail.
inline void StepElement(const AdamTensors& t, const AdamStepConstants& c, AdamGradType grad_type,
                        AdamCopyType copy_type, size_t i) {
  float p = t.params[i];
  float m = t.exp_avg[i];
  float v = t.exp_avg_sq[i];
  AdamUpdateElement(c, LoadGradElement(t.grads, grad_type, i), p, m, v);
  t.params[i] = p;
  t.exp_avg[i] = m;
  t.exp_avg_sq[i] = v;
  StoreCopyElement(t.param_copy, copy_type, i, p);
}

}  // namespace sluice::kernels::internal
