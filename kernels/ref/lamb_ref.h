// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning") over flat fp32 master
// parameters, with DeepSpeed's FusedLamb semantics (deepspeed/ops/lamb/fused_lamb.py,
// csrc/lamb/fused_lamb_cuda_kernel.cu): the types every backend shares, the per-step constants,
// the per-element arithmetic (the exact operation order every vectorized variant follows), the
// order in which the norms' squared sums are added, and the scalar reference itself. Gradient and
// copy dtypes are Adam's (kernels/ref/adam_ref.h).
//
// Per parameter tensor, with g = grad * grad_scale:
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
//   u = m / (sqrt(v) + eps) + weight_decay * p      (eps_inside_sqrt: m / sqrt(v + eps) + ...)
//   trust = ||p|| / ||u|| clamped to [min_coeff, max_coeff]; 1 when either norm is 0
//   p -= step_size * trust * u,  step_size = lr * sqrt(1 - b2^t) / (1 - b1^t)  (lr without
//                                                                                bias_correction)
// As in DeepSpeed, u uses the raw moments (the bias correction is folded into step_size only),
// and the weight decay is L2 inside u, scaled by the trust ratio.
//
// The trust ratio needs norms over the whole parameter, which ZeRO splits across shards and
// ranks, so a step is two passes: LambMoments updates m and v and returns the squared sums of p
// and u over its elements; the caller adds the sums of every piece of the parameter, derives the
// trust ratio (LambTrustRatio), and LambApply recomputes u from m, v and p (nothing is stored
// between the passes) and moves p. The squared sums are added in double in a fixed order
// (LambNormSums below), so that every ISA and thread count gives the same bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/ref/adam_ref.h"

namespace sluice::kernels {

struct LambHyperparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool bias_correction = true;
  bool eps_inside_sqrt = false;
  float max_coeff = 10.0f;  // DeepSpeed's defaults
  float min_coeff = 0.01f;
  int64_t step = 1;  // the 1-based step being taken (bias correction)
};

// Empty when valid, else what is wrong, naming the field ("min_coeff = 2 exceeds max_coeff = 1").
std::string LambHyperparamsError(const LambHyperparams& hyper);

// The flat tensors of one parameter's piece, all of `count` elements. grads (fp32, bf16 or fp16)
// is read by LambMoments only; param_copy (may be null, then copy_type kNone) is written by
// LambApply only.
struct LambTensors {
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const void* grads = nullptr;
  AdamGradType grad_type = AdamGradType::kF32;
  void* param_copy = nullptr;
  AdamCopyType copy_type = AdamCopyType::kNone;
  size_t count = 0;
};

// Empty when valid, else what is wrong: a null pointer with count > 0, a misaligned pointer, a
// copy type without a buffer or a buffer without a type. `need_grads`: LambMoments reads them.
std::string LambTensorsError(const LambTensors& t, bool need_grads);

// Elements [begin, begin + count) of `t`, as tensors of their own.
LambTensors SliceLambTensors(const LambTensors& t, size_t begin, size_t count);

// Per-step scalars, derived once per call (in double) and rounded to float.
struct LambStepConstants {
  float grad_scale = 1.0f;
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool eps_inside_sqrt = false;
  float step_size = 1e-3f;  // lr * sqrt(1 - b2^t) / (1 - b1^t), or lr
};

// grad_scale is the caller's combined factor: loss-scale inverse times the clip coefficient.
LambStepConstants MakeLambStepConstants(const LambHyperparams& hyper, float grad_scale);

// u for one element, from the updated moments.
inline float LambUpdateElement(const LambStepConstants& c, float param, float exp_avg,
                               float exp_avg_sq) {
  const float denom =
      c.eps_inside_sqrt ? std::sqrt(exp_avg_sq + c.eps) : std::sqrt(exp_avg_sq) + c.eps;
  return exp_avg / denom + c.weight_decay * param;
}

// Pass 1 for one element: updates the moments and returns u.
inline float LambMomentsElement(const LambStepConstants& c, float grad, float param, float& exp_avg,
                                float& exp_avg_sq) {
  const float g = grad * c.grad_scale;
  const float m = c.beta1 * exp_avg + c.one_minus_beta1 * g;
  const float v = c.beta2 * exp_avg_sq + c.one_minus_beta2 * g * g;
  exp_avg = m;
  exp_avg_sq = v;
  return LambUpdateElement(c, param, m, v);
}

// Pass 2 for one element: p - scale * u, with scale = LambApplyScale(step_size, trust).
inline float LambApplyElement(const LambStepConstants& c, float scale, float param, float exp_avg,
                              float exp_avg_sq) {
  return param - scale * LambUpdateElement(c, param, exp_avg, exp_avg_sq);
}

// The order of the squared sums. A piece of `count` elements is cut into blocks of
// kLambSumBlock elements from its first; within a block, lane k (of kLambSumLanes) adds
// double(x)^2 (exact) of the elements at block offsets k, k + 8, k + 16, ... in that order,
// starting from +0; the block's sum is ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)); the
// piece's sum adds the block sums in block order, starting from +0. Threads split a piece at
// block boundaries.
inline constexpr size_t kLambSumBlock = 16384;
inline constexpr size_t kLambSumLanes = 8;

struct LambNormSums {
  double param_sq = 0.0;   // sum of p^2 (before the step)
  double update_sq = 0.0;  // sum of u^2
};

inline double LambLaneSum(const double* lanes) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// DeepSpeed's lamb_coeff: ||p|| / ||u|| clamped to [min_coeff, max_coeff], 1 when either norm is
// 0 (a zero parameter, or nothing to move: the step is then plain step_size * u). A NaN or inf
// sum gives a NaN or clamped ratio, as DeepSpeed's does. Computed in double, rounded to float.
float LambTrustRatio(const LambNormSums& sums, const LambHyperparams& hyper);

// step_size * trust, rounded to float (DeepSpeed multiplies them first).
inline float LambApplyScale(const LambStepConstants& c, float trust) { return c.step_size * trust; }

// The plain scalar loops, single-threaded and not vectorized: the truth the tests compare every
// variant with (bit for bit), and the ref column's LAMB.
LambNormSums LambMomentsReference(const LambTensors& t, const LambHyperparams& hyper,
                                  float grad_scale);
void LambApplyReference(const LambTensors& t, const LambHyperparams& hyper, float trust);

}  // namespace sluice::kernels
