// CPU LAMB over flat fp32 master parameters and moments, as two fused passes per parameter
// (kernels/ref/lamb_ref.h has the semantics, DeepSpeed's FusedLamb, and the rounding):
// LambMoments reads the gradient (fp32, bf16 or fp16) scaled by the caller's combined factor,
// updates exp_avg and exp_avg_sq in place and returns the squared sums of p and of the update;
// the caller adds the sums of every piece of the parameter (other shards, other ranks), takes
// LambTrustRatio, and LambApply moves p (recomputing the update from p, m and v) and optionally
// writes a bf16 or fp16 copy. AVX-512, AVX2 and scalar variants are chosen by CPUID at run time
// (ForceIsa or SLUICE_ISA lower the choice) and agree bit for bit, sums included, whatever the
// thread count: LambMoments splits its range at the sums' block boundaries.
//
// Usage, one parameter in one piece:
//   LambTensors t{.params = p, .exp_avg = m, .exp_avg_sq = v, .grads = g, .count = n};
//   LambHyperparams hyper{.lr = 1e-3f, .weight_decay = 0.01f, .step = step};
//   LambNormSums sums = LambMoments(t, hyper, clip_coefficient / scale);
//   LambApply(t, hyper, LambTrustRatio(sums, hyper));
#pragma once

#include <string>

#include "kernels/cpu/adam_parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/lamb_ref.h"

namespace sluice::kernels {

// Empty when LambMoments (need_grads) or LambApply may run with these arguments, else what is
// wrong, naming the field.
std::string LambArgsError(const LambTensors& t, const LambHyperparams& hyper,
                          const AdamThreading& threading, bool need_grads);

// Pass 1 over t.count elements. Aborts on arguments LambArgsError rejects.
LambNormSums LambMoments(const LambTensors& t, const LambHyperparams& hyper, float grad_scale,
                         const AdamThreading& threading = {});

// Pass 2 with the parameter's trust ratio. Aborts on arguments LambArgsError rejects.
void LambApply(const LambTensors& t, const LambHyperparams& hyper, float trust,
               const AdamThreading& threading = {});

// The variant LambMoments and LambApply run now: SelectedIsa().
Isa LambIsa();

}  // namespace sluice::kernels
