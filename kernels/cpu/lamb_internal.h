// Shared by the CPU LAMB dispatcher and its per-ISA files: each ISA file (lamb_scalar.cpp,
// lamb_avx2.cpp, lamb_avx512.cpp) exports one LambVariant; lamb.cpp picks one by CPUID.
#pragma once

#include <cstddef>

#include "kernels/cpu/adam_internal.h"
#include "kernels/ref/lamb_ref.h"

namespace sluice::kernels::internal {

struct LambVariant {
  // Pass 1 over t, which starts at a sum block (lamb_ref.h): updates the moments and writes the
  // sums of block j of t to block_sums[j], j < ceil(t.count / kLambSumBlock).
  void (*moments)(const LambTensors& t, const LambStepConstants& c, LambNormSums* block_sums);
  // Pass 2 over one thread's range: p -= scale * u, and the copy.
  void (*apply)(const LambTensors& t, const LambStepConstants& c, float scale);
};

const LambVariant& LambScalarVariant();
const LambVariant& LambAvx2Variant();
const LambVariant& LambAvx512Variant();

// Pass 1's scalar element at t's index i, added to lane (i - block) % kLambSumLanes: every
// variant's tail.
inline void LambMomentsLane(const LambTensors& t, const LambStepConstants& c,
                            AdamGradType grad_type, size_t block, size_t i, double* param_lanes,
                            double* update_lanes) {
  const float p = t.params[i];
  const float u = LambMomentsElement(c, LoadGradElement(t.grads, grad_type, i), p, t.exp_avg[i],
                                     t.exp_avg_sq[i]);
  const size_t lane = (i - block) % kLambSumLanes;
  param_lanes[lane] += double{p} * double{p};
  update_lanes[lane] += double{u} * double{u};
}

// Pass 2's scalar element: every variant's head and tail.
inline void LambApplyAt(const LambTensors& t, const LambStepConstants& c, float scale,
                        AdamCopyType copy_type, size_t i) {
  const float p = LambApplyElement(c, scale, t.params[i], t.exp_avg[i], t.exp_avg_sq[i]);
  t.params[i] = p;
  StoreCopyElement(t.param_copy, copy_type, i, p);
}

}  // namespace sluice::kernels::internal
