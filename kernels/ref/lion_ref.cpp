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

namespace sluice::kernels {
namespace {

// Runs on every kernel call: builds a message only when something is wrong.
std::string CheckPointer(const void* pointer, const char* name, size_t element_size, size_t count) {
  const bool null = pointer == nullptr && count > 0;
  const bool misaligned = reinterpret_cast<uintptr_t>(pointer) % element_size != 0;
  if (!null && !misaligned) return "";
  std::ostringstream out;
  if (null) {
    out << name << " is null with count = " << count;
  } else {
    out << name << " = " << pointer << " is not aligned to its element size " << element_size;
  }
  return out.str();
}

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

template <AdamGradType kGrad>
void ReferenceForGrad(const LionTensors& t, const LionStepConstants& c) {
  switch (t.copy_type) {
    case AdamCopyType::kNone:
      return ReferenceLoop<kGrad, AdamCopyType::kNone>(t, c);
    case AdamCopyType::kBF16:
      return ReferenceLoop<kGrad, AdamCopyType::kBF16>(t, c);
    case AdamCopyType::kF16:
      return ReferenceLoop<kGrad, AdamCopyType::kF16>(t, c);
  }
}

}  // namespace

std::string LionHyperparamsError(const LionHyperparams& h) {
  std::ostringstream out;
  if (!std::isfinite(h.lr) || h.lr < 0.0f) {
    out << "lr = " << h.lr << " must be finite and >= 0";
  } else if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f)) {
    out << "beta1 = " << h.beta1 << " is outside [0, 1)";
  } else if (!(h.beta2 >= 0.0f && h.beta2 < 1.0f)) {
    out << "beta2 = " << h.beta2 << " is outside [0, 1)";
  } else if (!std::isfinite(h.weight_decay) || h.weight_decay < 0.0f) {
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
  if (t.copy_type == AdamCopyType::kNone) {
    if (t.param_copy != nullptr) {
      return "param_copy is set but copy_type is none: name the copy's type (bf16 or f16)";
    }
    return "";
  }
  if (t.param_copy == nullptr) {
    return std::string("copy_type is ") + AdamCopyTypeName(t.copy_type) +
           " but param_copy is null: pass the staging buffer or copy_type none";
  }
  return CheckPointer(t.param_copy, "param_copy", AdamCopyTypeSize(t.copy_type), t.count);
}

LionTensors SliceLionTensors(const LionTensors& t, size_t begin, size_t count) {
  LionTensors slice = t;
  slice.params = t.params + begin;
  slice.exp_avg = t.exp_avg + begin;
  slice.grads = static_cast<const char*>(t.grads) + begin * AdamGradTypeSize(t.grad_type);
  if (t.param_copy != nullptr) {
    slice.param_copy = static_cast<char*>(t.param_copy) + begin * AdamCopyTypeSize(t.copy_type);
  }
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
  switch (t.grad_type) {
    case AdamGradType::kF32:
      return ReferenceForGrad<AdamGradType::kF32>(t, c);
    case AdamGradType::kBF16:
      return ReferenceForGrad<AdamGradType::kBF16>(t, c);
    case AdamGradType::kF16:
      return ReferenceForGrad<AdamGradType::kF16>(t, c);
  }
}

}  // namespace sluice::kernels
