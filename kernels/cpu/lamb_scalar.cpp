// The portable variant, for CPUs without AVX2. Plain loops; the compiler may vectorize them with
// baseline SSE2, but never contracts into fused multiply-add nor reorders the sums, so results
// match the reference.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>

#include "kernels/cpu/lamb_internal.h"

namespace sluice::kernels::internal {
namespace {

void Moments(const LambTensors& t, const LambStepConstants& c, LambNormSums* block_sums) {
  for (size_t block = 0; block < t.count; block += kLambSumBlock) {
    double param_lanes[kLambSumLanes] = {};
    double update_lanes[kLambSumLanes] = {};
    const size_t end = std::min(t.count, block + kLambSumBlock);
    for (size_t i = block; i < end; ++i) {
      LambMomentsLane(t, c, t.grad_type, block, i, param_lanes, update_lanes);
    }
    *block_sums++ = {LambLaneSum(param_lanes), LambLaneSum(update_lanes)};
  }
}

void Apply(const LambTensors& t, const LambStepConstants& c, float scale) {
  VisitAdamTypes(AdamGradType::kF32, t.copy_type, [&]<AdamGradType, AdamCopyType kCopy>() {
    for (size_t i = 0; i < t.count; ++i) LambApplyAt(t, c, scale, kCopy, i);
  });
}

}  // namespace

const LambVariant& LambScalarVariant() {
  static constexpr LambVariant kVariant{&Moments, &Apply};
  return kVariant;
}

}  // namespace sluice::kernels::internal
