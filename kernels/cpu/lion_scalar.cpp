// The portable variant, for CPUs without AVX2. Plain loops; the compiler may vectorize them with
// baseline SSE2, but never contracts into fused multiply-add, so results match the reference.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels/cpu/lion_internal.h"

namespace sluice::kernels::internal {
namespace {

void Step(const LionTensors& t, const LionStepConstants& c) {
  VisitAdamTypes(t.grad_type, t.copy_type, [&]<AdamGradType kGrad, AdamCopyType kCopy>() {
    for (size_t i = 0; i < t.count; ++i) LionStepElement(t, c, kGrad, kCopy, i);
  });
}

}  // namespace

const LionVariant& LionScalarVariant() {
  static constexpr LionVariant kVariant{&Step};
  return kVariant;
}

}  // namespace sluice::kernels::internal
