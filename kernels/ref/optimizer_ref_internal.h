// What the scalar optimizer references (adam_ref.cpp, lion_ref.cpp, lamb_ref.cpp) share around
// their per-element arithmetic: the argument checks' messages, a slice's gradient and copy
// pointers, and the dispatch from the runtime gradient and copy dtypes to a loop compiled for each
// pair. Nothing here does float arithmetic, so the references' rounding stays in their own files
// (under their no-contraction pragmas).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

#include "kernels/ref/adam_ref.h"

namespace sluice::kernels::optimizer_ref {

// Runs on every kernel call: builds a message only when something is wrong.
inline std::string CheckPointer(const void* pointer, const char* name, size_t element_size,
                                size_t count) {
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

// The checks every optimizer's hyperparameters start with: a finite lr >= 0 and betas in [0, 1).
// The first failing one's message, or empty.
inline std::string LrAndBetasError(float lr, float beta1, float beta2) {
  std::ostringstream out;
  if (!std::isfinite(lr) || lr < 0.0f) {
    out << "lr = " << lr << " must be finite and >= 0";
  } else if (!(beta1 >= 0.0f && beta1 < 1.0f)) {
    out << "beta1 = " << beta1 << " is outside [0, 1)";
  } else if (!(beta2 >= 0.0f && beta2 < 1.0f)) {
    out << "beta2 = " << beta2 << " is outside [0, 1)";
  }
  return out.str();
}

// The low-precision copy's arguments: a buffer exactly when a copy type is named, aligned to it.
inline std::string CopyError(const void* param_copy, AdamCopyType copy_type, size_t count) {
  if (copy_type == AdamCopyType::kNone) {
    if (param_copy != nullptr) {
      return "param_copy is set but copy_type is none: name the copy's type (bf16 or f16)";
    }
    return "";
  }
  if (param_copy == nullptr) {
    return std::string("copy_type is ") + AdamCopyTypeName(copy_type) +
           " but param_copy is null: pass the staging buffer or copy_type none";
  }
  return CheckPointer(param_copy, "param_copy", AdamCopyTypeSize(copy_type), count);
}

// A slice's gradient and copy pointers, `begin` elements into the whole tensors' (a null copy
// stays null).
inline const void* OffsetGrads(const void* grads, AdamGradType grad_type, size_t begin) {
  return static_cast<const char*>(grads) + begin * AdamGradTypeSize(grad_type);
}
inline void* OffsetCopy(void* param_copy, AdamCopyType copy_type, size_t begin) {
  if (param_copy == nullptr) return nullptr;
  return static_cast<char*>(param_copy) + begin * AdamCopyTypeSize(copy_type);
}

template <AdamCopyType kCopy>
using CopyTag = std::integral_constant<AdamCopyType, kCopy>;
template <AdamGradType kGrad>
using GradTag = std::integral_constant<AdamGradType, kGrad>;

// Calls loop(CopyTag<kCopy>{}) for the runtime `copy_type`, so the loop is compiled per type.
template <typename Loop>
void DispatchCopy(AdamCopyType copy_type, Loop&& loop) {
  switch (copy_type) {
    case AdamCopyType::kNone:
      return loop(CopyTag<AdamCopyType::kNone>{});
    case AdamCopyType::kBF16:
      return loop(CopyTag<AdamCopyType::kBF16>{});
    case AdamCopyType::kF16:
      return loop(CopyTag<AdamCopyType::kF16>{});
  }
}

// Calls loop(GradTag<kGrad>{}, CopyTag<kCopy>{}) for the runtime pair.
template <typename Loop>
void DispatchGradAndCopy(AdamGradType grad_type, AdamCopyType copy_type, Loop&& loop) {
  auto for_grad = [&](auto grad) { DispatchCopy(copy_type, [&](auto copy) { loop(grad, copy); }); };
  switch (grad_type) {
    case AdamGradType::kF32:
      return for_grad(GradTag<AdamGradType::kF32>{});
    case AdamGradType::kBF16:
      return for_grad(GradTag<AdamGradType::kBF16>{});
    case AdamGradType::kF16:
      return for_grad(GradTag<AdamGradType::kF16>{});
  }
}

}  // namespace sluice::kernels::optimizer_ref
