// Adam and AdamW over flat fp32 master parameters: the types every backend shares, the per-step
// constants, the per-element update (the exact operation order every vectorized variant follows,
// so that all of them round like this reference), and the scalar reference itself.
//
// Semantics are PyTorch's and DeepSpeed's: step t starts at 1, g = grad * grad_scale;
// Adam adds weight_decay * p to g (L2), AdamW first multiplies p by (1 - lr * weight_decay);
// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; denom = sqrt(v) * (1/sqrt(1-b2^t)) + eps;
// p -= (lr/(1-b1^t)) * m/denom. With bias_correction off both corrections are 1.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/ref/half.h"

namespace sluice::kernels {

enum class AdamGradType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };
// The low-precision copy of the updated parameters (the staging buffer sent to the device).
enum class AdamCopyType : uint8_t { kNone = 0, kBF16 = 1, kF16 = 2 };

const char* AdamGradTypeName(AdamGradType type);  // "f32", "bf16", "f16"
const char* AdamCopyTypeName(AdamCopyType type);  // "none", "bf16", "f16"
size_t AdamGradTypeSize(AdamGradType type);
size_t AdamCopyTypeSize(AdamCopyType type);  // 0 for kNone

struct AdamHyperparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adamw_mode = true;  // decoupled weight decay (AdamW) instead of L2 (Adam)
  bool bias_correction = true;
  int64_t step = 1;  // the step being taken, starting at 1
};

// Empty when valid, else what is wrong, naming the field ("beta2 = 1 is outside [0, 1)").
std::string AdamHyperparamsError(const AdamHyperparams& hyper);

// The flat tensors of one Adam step, all of `count` elements. grads points at fp32, bf16 or fp16
// values; param_copy may be null (then copy_type must be kNone).
struct AdamTensors {
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const void* grads = nullptr;
  AdamGradType grad_type = AdamGradType::kF32;
  void* param_copy = nullptr;
  AdamCopyType copy_type = AdamCopyType::kNone;
  size_t count = 0;
};

// Empty when valid, else what is wrong: a null pointer with count > 0, a pointer not aligned to
// its element size, a copy type without a buffer or a buffer without a type.
std::string AdamTensorsError(const AdamTensors& t);

// Elements [begin, begin + count) of `t`, as tensors of their own.
AdamTensors SliceAdamTensors(const AdamTensors& t, size_t begin, size_t count);

// Per-step scalars, derived once per call in double and rounded to float.
struct AdamStepConstants {
  float grad_scale = 1.0f;
  float l2_decay = 0.0f;     // Adam: weight_decay; AdamW: 0
  float param_decay = 1.0f;  // AdamW: 1 - lr * weight_decay; Adam: 1
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float step_size = 1e-3f;  // lr / (1 - beta1^t)
  // 1 / sqrt(1 - beta2^t): multiplied, as DeepSpeed does, rather than divided as PyTorch does.
  // The two differ by at most an ulp of the denominator, and a second division per element would
  // make the kernel divider-bound instead of memory-bound on AVX2 machines.
  float bias_correction2_rsqrt = 1.0f;
};

// grad_scale is the caller's combined factor: loss-scale inverse times the clip coefficient.
AdamStepConstants MakeAdamStepConstants(const AdamHyperparams& hyper, float grad_scale);

// One element. Every variant performs these operations in this order, without fused
// multiply-add, so that all of them agree with the reference bit for bit.
inline void AdamUpdateElement(const AdamStepConstants& c, float grad, float& param, float& exp_avg,
                              float& exp_avg_sq) {
  float g = grad * c.grad_scale;
  float p = param;
  if (c.l2_decay != 0.0f) g = g + c.l2_decay * p;
  p = p * c.param_decay;
  float m = c.beta1 * exp_avg + c.one_minus_beta1 * g;
  float v = c.beta2 * exp_avg_sq + c.one_minus_beta2 * g * g;
  float denom = std::sqrt(v) * c.bias_correction2_rsqrt + c.eps;
  param = p - c.step_size * (m / denom);
  exp_avg = m;
  exp_avg_sq = v;
}

inline float LoadGradElement(const void* grads, AdamGradType type, size_t i) {
  switch (type) {
    case AdamGradType::kF32:
      return static_cast<const float*>(grads)[i];
    case AdamGradType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(grads)[i]);
    case AdamGradType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(grads)[i]);
  }
  return 0.0f;
}

inline void StoreCopyElement(void* copy, AdamCopyType type, size_t i, float value) {
  switch (type) {
    case AdamCopyType::kNone:
      return;
    case AdamCopyType::kBF16:
      static_cast<uint16_t*>(copy)[i] = F32ToBf16(value);
      return;
    case AdamCopyType::kF16:
      static_cast<uint16_t*>(copy)[i] = F32ToF16(value);
      return;
  }
}

// The plain scalar loop, single-threaded and deliberately not vectorized: the truth the tests
// compare every variant with, and the baseline the benchmark measures speed-ups against.
void AdamStepReference(const AdamTensors& t, const AdamHyperparams& hyper, float grad_scale);

}  // namespace sluice::kernels
