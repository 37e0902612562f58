// Shared by the CPU Lion dispatcher and its per-ISA files: each ISA file (lion_scalar.cpp,
// lion_avx2.cpp, lion_avx512.cpp) exports one LionVariant; lion.cpp picks one by CPUID.
#pragma once

#include <cstddef>

#include "kernels/cpu/adam_internal.h"
#include "kernels/ref/lion_ref.h"

namespace sluice::kernels::internal {

struct LionVariant {
  // The update over one thread's contiguous range.
  void (*step)(const LionTensors& t, const LionStepConstants& c);
};

const LionVariant& LionScalarVariant();
const LionVariant& LionAvx2Variant();
const LionVariant& LionAvx512Variant();

// The step's scalar element, shared by every variant's head and tail.
inline void LionStepElement(const LionTensors& t, const LionStepConstants& c,
                            AdamGradType grad_type, AdamCopyType copy_type, size_t i) {
  float p = t.params[i];
  float m = t.exp_avg[i];
  LionUpdateElement(c, LoadGradElement(t.grads, grad_type, i), p, m);
  t.params[i] = p;
  t.exp_avg[i] = m;
  StoreCopyElement(t.param_copy, copy_type, i, p);
}

}  // namespace sluice::kernels::internal
