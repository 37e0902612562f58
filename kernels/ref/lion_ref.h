// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") over flat fp32 master
// parameters: the types every backend shares, the per-step constants, the per-element update (the
// exact operation order every vectorized variant follows, so that all of them round like this
// reference), and the scalar reference itself. Gradient and copy dtypes are Adam's
// (kernels/ref/adam_ref.h): the same gradients in, the same staging copy out.
//
// Semantics are DeepSpeed's FusedLion / DeepSpeedCPULion: g = grad * grad_scale;
// p *= 1 - lr * weight_decay (decoupled decay); c = b1*m + (1-b1)*g; p -= lr * sign(c);
// m = b2*m + (1-b2)*g. One state tensor (exp_avg), no bias correction, no eps.
//
// sign(0) is 0 here, as in the paper and torch.sign: DeepSpeed's two kernels disagree with each
// other at exactly c == 0 (the CUDA one moves the parameter by +lr, the CPU one by -lr for +0), so
// neither is a contract to copy, and with 0 a parameter whose gradient and momentum are both zero
// (ZeRO's padding, an embedding row never seen) stays where it is, so that every ZeRO stage and
// every shard layout steps the real parameters identically. A NaN c makes the parameter NaN.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/ref/adam_ref.h"

namespace sluice::kernels {

struct LionHyperparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;  // DeepSpeed's default (the paper's is 0.99)
  float weight_decay = 0.0f;
};

// Empty when valid, else what is wrong, naming the field ("beta2 = 1 is outside [0, 1)").
std::string LionHyperparamsError(const LionHyperparams& hyper);

// The flat tensors of one Lion step, all of `count` elements. grads points at fp32, bf16 or fp16
// values; param_copy may be null (then copy_type must be kNone).
struct LionTensors {
  float* params = nullptr;
  float* exp_avg = nullptr;
  const void* grads = nullptr;
  AdamGradType grad_type = AdamGradType::kF32;
  void* param_copy = nullptr;
  AdamCopyType copy_type = AdamCopyType::kNone;
  size_t count = 0;
};

// Empty when valid, else what is wrong: a null pointer with count > 0, a pointer not aligned to
// its element size, a copy type without a buffer or a buffer without a type.
std::string LionTensorsError(const LionTensors& t);

// Elements [begin, begin + count) of `t`, as tensors of their own.
LionTensors SliceLionTensors(const LionTensors& t, size_t begin, size_t count);

// Per-step scalars, derived once per call (in double where a product is involved) and rounded to
// float.
struct LionStepConstants {
  float grad_scale = 1.0f;
  float param_decay = 1.0f;  // 1 - lr * weight_decay
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float lr = 1e-3f;
};

// grad_scale is the caller's combined factor: loss-scale inverse times the clip coefficient.
LionStepConstants MakeLionStepConstants(const LionHyperparams& hyper, float grad_scale);

// lr * sign(c): lr, -lr, 0 for c == ±0, and c itself (NaN) when c is NaN.
inline float LionSignedStep(float c, float lr) {
  if (c > 0.0f) return lr;
  if (c < 0.0f) return -lr;
  return c == c ? 0.0f : c;
}

// One element. Every variant performs these operations in this order, without fused
// multiply-add, so that all of them agree with the reference bit for bit.
inline void LionUpdateElement(const LionStepConstants& c, float grad, float& param,
                              float& exp_avg) {
  float g = grad * c.grad_scale;
  float p = param * c.param_decay;
  float m = exp_avg;
  float direction = c.beta1 * m + c.one_minus_beta1 * g;
  param = p - LionSignedStep(direction, c.lr);
  exp_avg = c.beta2 * m + c.one_minus_beta2 * g;
}

// The plain scalar loop, single-threaded and not vectorized: the truth the tests compare every
// variant with (bit for bit), and the ref ops backend's Lion.
void LionStepReference(const LionTensors& t, const LionHyperparams& hyper, float grad_scale);

}  // namespace sluice::kernels
