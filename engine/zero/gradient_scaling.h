// How the stage 0-1 all-reduce turns the ranks' gradients into their average: DeepSpeed's
// prescale_gradients and gradient_predivide_factor (engine.py allreduce_bucket,
// stage_1_and_2.py gradient_reduction_w_predivide), over a world of N ranks:
//   default (prescale false, factor 1)  the collective averages (ReduceOp::kAvg), as Sluice
//                                       always did: the same bits as before these keys existed;
//   prescale_gradients true             g * (1/N) on every rank, then the sum (the factor is
//                                       not used, as in DeepSpeed);
//   gradient_predivide_factor f != 1    g * (1/f), the sum, then * (f/N) unless f == N.
// Each factor is computed in double and rounded to fp32, and each product rounds once in fp32, as
// torch's tensor.mul_(python_float) does on an fp32 tensor. The scaled variants keep large
// gradients from overflowing in the sum (in fp16 reductions, where DeepSpeed uses them); in
// Sluice's fp32 reduction they change only the rounding of the average.
//
// Stages 2 and 3 reduce-scatter, where DeepSpeed refuses both keys (as the config does).
#pragma once

#include "runtime/comm.h"

namespace sluice::zero {

struct GradientScaling {
  float before = 1.0f;           // multiplies each rank's gradients before the collective
  ReduceOp op = ReduceOp::kAvg;  // the collective's reduction
  float after = 1.0f;            // multiplies the reduced gradients after it

  bool operator==(const GradientScaling&) const = default;
};

// `world`: the ranks of the all-reduce (>= 1); `predivide_factor` finite and > 0.
GradientScaling GradientScalingFor(bool prescale_gradients, double predivide_factor, int world);

}  // namespace sluice::zero
