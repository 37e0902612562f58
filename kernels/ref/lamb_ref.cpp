// The reference must stay scalar and uncontracted: it defines the rounding every variant matches.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("no-tree-vectorize", "fp-contract=off")
#endif

#include "kernels/ref/lamb_ref.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "kernels/ref/optimizer_ref_internal.h"

namespace sluice::kernels {
namespace {

using optimizer_ref::CheckPointer;
using optimizer_ref::CopyError;

template <AdamCopyType kCopy>
void ApplyLoop(const LambTensors& t, const LambStepConstants& c, float scale) {
  for (size_t i = 0; i < t.count; ++i) {
    const float p = LambApplyElement(c, scale, t.params[i], t.exp_avg[i], t.exp_avg_sq[i]);
    t.params[i] = p;
    StoreCopyElement(t.param_copy, kCopy, i, p);
  }
}

}  // namespace

std::string LambHyperparamsError(const LambHyperparams& h) {
  std::string error = optimizer_ref::LrAndBetasError(h.lr, h.beta1, h.beta2);
  if (!error.empty()) return error;
  std::ostringstream out;
  if (!std::isfinite(h.eps) || h.eps <= 0.0f) {
    out << "eps = " << h.eps << " must be finite and > 0";
  } else if (!std::isfinite(h.weight_decay) || h.weight_decay < 0.0f) {
    out << "weight_decay = " << h.weight_decay << " must be finite and >= 0";
  } else if (!std::isfinite(h.min_coeff) || h.min_coeff < 0.0f) {
    out << "min_coeff = " << h.min_coeff << " must be finite and >= 0";
  } else if (!std::isfinite(h.max_coeff) || h.max_coeff < h.min_coeff) {
    out << "max_coeff = " << h.max_coeff << " must be finite and >= min_coeff = " << h.min_coeff;
  } else if (h.step < 1) {
    out << "step = " << h.step << " must be >= 1 (the 1-based step being taken)";
  }
  return out.str();
}

std::string LambTensorsError(const LambTensors& t, bool need_grads) {
  for (std::string error :
       {CheckPointer(t.params, "params", sizeof(float), t.count),
        CheckPointer(t.exp_avg, "exp_avg", sizeof(float), t.count),
        CheckPointer(t.exp_avg_sq, "exp_avg_sq", sizeof(float), t.count),
        need_grads ? CheckPointer(t.grads, "grads", AdamGradTypeSize(t.grad_type), t.count)
                   : std::string()}) {
    if (!error.empty()) return error;
  }
  return CopyError(t.param_copy, t.copy_type, t.count);
}

LambTensors SliceLambTensors(const LambTensors& t, size_t begin, size_t count) {
  LambTensors slice = t;
  slice.params = t.params + begin;
  slice.exp_avg = t.exp_avg + begin;
  slice.exp_avg_sq = t.exp_avg_sq + begin;
  // LambApply's tensors may leave the gradient out.
  if (t.grads != nullptr) slice.grads = optimizer_ref::OffsetGrads(t.grads, t.grad_type, begin);
  slice.param_copy = optimizer_ref::OffsetCopy(t.param_copy, t.copy_type, begin);
  slice.count = count;
  return slice;
}

LambStepConstants MakeLambStepConstants(const LambHyperparams& h, float grad_scale) {
  LambStepConstants c;
  c.grad_scale = grad_scale;
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - double{h.beta1});
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - double{h.beta2});
  c.eps = h.eps;
  c.weight_decay = h.weight_decay;
  c.eps_inside_sqrt = h.eps_inside_sqrt;
  if (h.bias_correction) {
    const double t = static_cast<double>(h.step);
    const double correction1 = 1.0 - std::pow(double{h.beta1}, t);
    const double correction2 = 1.0 - std::pow(double{h.beta2}, t);
    c.step_size = static_cast<float>(double{h.lr} * std::sqrt(correction2) / correction1);
  } else {
    c.step_size = h.lr;
  }
  return c;
}

float LambTrustRatio(const LambNormSums& sums, const LambHyperparams& hyper) {
  const double param_norm = std::sqrt(sums.param_sq);
  const double update_norm = std::sqrt(sums.update_sq);
  // DeepSpeed: `if (reg_w != 0 && reg_u != 0)`; a NaN norm passes that test and stays NaN
  // through the clamps, which compare false.
  if (param_norm == 0.0 || update_norm == 0.0) return 1.0f;
  double ratio = param_norm / update_norm;
  if (ratio > hyper.max_coeff) ratio = hyper.max_coeff;
  if (ratio < hyper.min_coeff) ratio = hyper.min_coeff;
  return static_cast<float>(ratio);
}

LambNormSums LambMomentsReference(const LambTensors& t, const LambHyperparams& hyper,
                                  float grad_scale) {
  const LambStepConstants c = MakeLambStepConstants(hyper, grad_scale);
  LambNormSums total;
  for (size_t block = 0; block < t.count; block += kLambSumBlock) {
    double param_lanes[kLambSumLanes] = {};
    double update_lanes[kLambSumLanes] = {};
    const size_t end = std::min(t.count, block + kLambSumBlock);
    for (size_t i = block; i < end; ++i) {
      const float p = t.params[i];
      const float u = LambMomentsElement(c, LoadGradElement(t.grads, t.grad_type, i), p,
                                         t.exp_avg[i], t.exp_avg_sq[i]);
      const size_t lane = (i - block) % kLambSumLanes;
      param_lanes[lane] += double{p} * double{p};
      update_lanes[lane] += double{u} * double{u};
    }
    total.param_sq += LambLaneSum(param_lanes);
    total.update_sq += LambLaneSum(update_lanes);
  }
  return total;
}

void LambApplyReference(const LambTensors& t, const LambHyperparams& hyper, float trust) {
  const LambStepConstants c = MakeLambStepConstants(hyper, 1.0f);
  const float scale = LambApplyScale(c, trust);
  optimizer_ref::DispatchCopy(t.copy_type,
                              [&](auto copy) { ApplyLoop<decltype(copy)::value>(t, c, scale); });
}

}  // namespace sluice::kernels
