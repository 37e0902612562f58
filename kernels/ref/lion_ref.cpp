// The reference must stay scalar and uncontracted: it defines the rounding every variant matches.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("no-tree-vectorize", "fp-contract=off")
#endif

#include "kernels/ref/lion_ref.h"

#include <cmath>
#include <cstdint>
#include <sstream>

#include "kernels/ref/optimizer_ref_internal.h"

namespace sluice::kernels {
namespace {

using optimizer_ref::CheckPointer;
using optimizer_ref::CopyError;

template <AdamGradType kGrad, AdamCopyType kCopy>
void ReferenceLoop(const LionTensors& t, const LionStepConstants& c) {
  for (size_t i = 0; i < t.count; ++i) {
    float p = t.params[i];
    float m = t.exp_avg[i];
    LionUpdateElement(c, LoadGradElement(t.grads, kGrad, i), p, m);
    t.params[i] = p;
    t.exp_avg[i] = m;
    StoreCopyElement(t.param_copy, kCopy, i, p);
  }
}

}  // namespace

std::string LionHyperparamsError(const LionHyperparams& h) {
  std::string error = optimizer_ref::LrAndBetasError(h.lr, h.beta1, h.beta2);
  if (!error.empty()) return error;
  std::ostringstream out;
  if (!std::isfinite(h.weight_decay) || h.weight_decay < 0.0f) {
    out << "weight_decay = " << h.weight_decay << " must be finite and >= 0";
  }
  return out.str();
}

std::string LionTensorsError(const LionTensors& t) {
  for (std::string error :
       {CheckPointer(t.params, "params", sizeof(float), t.count),
        CheckPointer(t.exp_avg, "exp_avg", sizeof(float), t.count),
        CheckPointer(t.grads, "grads", AdamGradTypeSize(t.grad_type), t.count)}) {
    if (!error.empty()) return error;
  }
  return CopyError(t.param_copy, t.copy_type, t.count);
}

LionTensors SliceLionTensors(const LionTensors& t, size_t begin, size_t count) {
  LionTensors slice = t;
  slice.params = t.params + begin;
  slice.exp_avg = t.exp_avg + begin;
  slice.grads = optimizer_ref::OffsetGrads(t.grads, t.grad_type, begin);
  slice.param_copy = optimizer_ref::OffsetCopy(t.param_copy, t.copy_type, begin);
  slice.count = count;
  return slice;
}

LionStepConstants MakeLionStepConstants(const LionHyperparams& h, float grad_scale) {
  LionStepConstants c;
  c.grad_scale = grad_scale;
  c.param_decay = static_cast<float>(1.0 - double{h.lr} * h.weight_decay);
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - double{h.beta1});
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - double{h.beta2});
  c.lr = h.lr;
  return c;
}

void LionStepReference(const LionTensors& t, const LionHyperparams& hyper, float grad_scale) {
  const LionStepConstants c = MakeLionStepConstants(hyper, grad_scale);
  optimizer_ref::DispatchGradAndCopy(t.grad_type, t.copy_type, [&](auto grad, auto copy) {
    ReferenceLoop<decltype(grad)::value, decltype(copy)::value>(t, c);
  });
}

}  // namespace sluice::kernels
