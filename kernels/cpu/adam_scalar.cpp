// The portable variant, for CPUs without AVX2. Plain loops; the compiler may vectorize them with
// baseline SSE2, but never contracts into fused multiply-add, so results match the reference.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels/cpu/adam_internal.h"

namespace sluice::kernels::internal {
namespace {

void Step(const AdamTensors& t, const AdamStepConstants& c) {
  VisitAdamTypes(t.grad_type, t.copy_type, [&]<AdamGradType kGrad, AdamCopyType kCopy>() {
    for (size_t i = 0; i < t.count; ++i) StepElement(t, c, kGrad, kCopy, i);
  });
}

void Probe(const AdamTensors& t) {
  VisitAdamTypes(t.grad_type, t.copy_type, [&]<AdamGradType kGrad, AdamCopyType kCopy>() {
    for (size_t i = 0; i < t.count; ++i) ProbeElement(t, kGrad, kCopy, i);
  });
}

}  // namespace

const AdamVariant& AdamScalarVariant() {
  static constexpr AdamVariant kVariant{&Step, &Probe};
  return kVariant;
}

}  // namespace sluice::kernels::internal
