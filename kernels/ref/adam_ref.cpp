// The reference is also the benchmark's "plain scalar loop" baseline, so it must stay scalar: no
// auto-vectorization, and no fused multiply-add contraction (it defines the rounding).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("no-tree-vectorize", "fp-contract=off")
#endif

#include "kernels/ref/adam_ref.h"

#include <cmath>
#include <sstream>

#include "kernels/ref/optimizer_ref_internal.h"

namespace sluice::kernels {
namespace {

using optimizer_ref::CheckPointer;
using optimizer_ref::CopyError;

template <AdamGradType kGrad, AdamCopyType kCopy>
void ReferenceLoop(const AdamTensors& t, const AdamStepConstants& c) {
  for (size_t i = 0; i < t.count; ++i) {
    float p = t.params[i];
    float m = t.exp_avg[i];
    float v = t.exp_avg_sq[i];
    AdamUpdateElement(c, LoadGradElement(t.grads, kGrad, i), p, m, v);
    t.params[i] = p;
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
    StoreCopyElement(t.param_copy, kCopy, i, p);
  }
}

}  // namespace

const char* AdamGradTypeName(AdamGradType type) {
  switch (type) {
    case AdamGradType::kF32:
      return "f32";
    case AdamGradType::kBF16:
      return "bf16";
    case AdamGradType::kF16:
      return "f16";
  }
  return "?";
}

const char* AdamCopyTypeName(AdamCopyType type) {
  switch (type) {
    case AdamCopyType::kNone:
      return "none";
    case AdamCopyType::kBF16:
      return "bf16";
    case AdamCopyType::kF16:
      return "f16";
  }
  return "?";
}

size_t AdamGradTypeSize(AdamGradType type) { return type == AdamGradType::kF32 ? 4 : 2; }

size_t AdamCopyTypeSize(AdamCopyType type) { return type == AdamCopyType::kNone ? 0 : 2; }

std::string AdamHyperparamsError(const AdamHyperparams& h) {
  std::string error = optimizer_ref::LrAndBetasError(h.lr, h.beta1, h.beta2);
  if (!error.empty()) return error;
  std::ostringstream out;
  if (!std::isfinite(h.eps) || h.eps < 0.0f) {
    out << "eps = " << h.eps << " must be finite and >= 0";
  } else if (!std::isfinite(h.weight_decay) || h.weight_decay < 0.0f) {
    out << "weight_decay = " << h.weight_decay << " must be finite and >= 0";
  } else if (h.step < 1) {
    out << "step = " << h.step << " must be >= 1 (the first step is 1)";
  }
  return out.str();
}

std::string AdamTensorsError(const AdamTensors& t) {
  for (std::string error :
       {CheckPointer(t.params, "params", sizeof(float), t.count),
        CheckPointer(t.exp_avg, "exp_avg", sizeof(float), t.count),
        CheckPointer(t.exp_avg_sq, "exp_avg_sq", sizeof(float), t.count),
        CheckPointer(t.grads, "grads", AdamGradTypeSize(t.grad_type), t.count)}) {
    if (!error.empty()) return error;
  }
  return CopyError(t.param_copy, t.copy_type, t.count);
}

AdamTensors SliceAdamTensors(const AdamTensors& t, size_t begin, size_t count) {
  AdamTensors slice = t;
  slice.params = t.params + begin;
  slice.exp_avg = t.exp_avg + begin;
  slice.exp_avg_sq = t.exp_avg_sq + begin;
  slice.grads = optimizer_ref::OffsetGrads(t.grads, t.grad_type, begin);
  slice.param_copy = optimizer_ref::OffsetCopy(t.param_copy, t.copy_type, begin);
  slice.count = count;
  return slice;
}

AdamStepConstants MakeAdamStepConstants(const AdamHyperparams& h, float grad_scale) {
  double beta1 = h.beta1;
  double beta2 = h.beta2;
  double bias_correction1 = 1.0;
  double bias_correction2 = 1.0;
  if (h.bias_correction) {
    bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(h.step));
    bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(h.step));
  }
  AdamStepConstants c;
  c.grad_scale = grad_scale;
  c.l2_decay = h.adamw_mode ? 0.0f : h.weight_decay;
  c.param_decay = h.adamw_mode ? static_cast<float>(1.0 - double{h.lr} * h.weight_decay) : 1.0f;
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.eps = h.eps;
  c.step_size = static_cast<float>(h.lr / bias_correction1);
  c.bias_correction2_rsqrt = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  return c;
}

void AdamStepReference(const AdamTensors& t, const AdamHyperparams& hyper, float grad_scale) {
  AdamStepConstants c = MakeAdamStepConstants(hyper, grad_scale);
  optimizer_ref::DispatchGradAndCopy(t.grad_type, t.copy_type, [&](auto grad, auto copy) {
    ReferenceLoop<decltype(grad)::value, decltype(copy)::value>(t, c);
  });
}

}  // namespace sluice::kernels
