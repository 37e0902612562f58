// The Adam kernel. Every operation is an explicit round-to-nearest intrinsic, so nvcc cannot
// contract a product and a sum into an FMA: the element update must round exactly as
// kernels::AdamUpdateElement (kernels/ref/adam_ref.h), whose order it follows line by line.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/adam.h"
#include "kernels/cuda/half_bits.cuh"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

using internal::AfterLaunch;
using internal::Aligned;
using internal::Bf16BitsToF32;
using internal::F16BitsToF32;
using internal::F32ToBf16Bits;
using internal::F32ToF16Bits;
using internal::GridFor;

// AdamGradType / AdamCopyType as template arguments.
constexpr int kAdamF32 = static_cast<int>(AdamGradType::kF32);
constexpr int kAdamBf16 = static_cast<int>(AdamGradType::kBF16);
constexpr int kAdamF16 = static_cast<int>(AdamGradType::kF16);
constexpr int kAdamNone = static_cast<int>(AdamCopyType::kNone);
static_assert(kAdamBf16 == static_cast<int>(AdamCopyType::kBF16) &&
              kAdamF16 == static_cast<int>(AdamCopyType::kF16));

struct AdamKernelArgs {
  float* params;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grads;
  void* param_copy;  // null when copy_type is none
  int64_t count;
  const float* device_grad_scale;  // null: constants.grad_scale
  AdamStepConstants constants;
};

constexpr unsigned kThreads = 256;
constexpr int kVec = 4;  // elements per vector access: 16 B of fp32, 8 B of 16-bit values

__device__ __forceinline__ void UpdateElement(const AdamStepConstants& c, float grad_scale,
                                              float grad, float& param, float& exp_avg,
                                              float& exp_avg_sq) {
  float g = __fmul_rn(grad, grad_scale);
  float p = param;
  if (c.l2_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(c.l2_decay, p));
  p = __fmul_rn(p, c.param_decay);
  const float m = __fadd_rn(__fmul_rn(c.beta1, exp_avg), __fmul_rn(c.one_minus_beta1, g));
  // (1 - beta2) * g * g groups left to right, as in C++.
  const float v =
      __fadd_rn(__fmul_rn(c.beta2, exp_avg_sq), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.bias_correction2_rsqrt), c.eps);
  param = __fsub_rn(p, __fmul_rn(c.step_size, __fdiv_rn(m, denom)));
  exp_avg = m;
  exp_avg_sq = v;
}

template <int kGrad>
__device__ __forceinline__ float GradToF32(uint16_t bits) {
  return kGrad == kAdamBf16 ? Bf16BitsToF32(bits) : F16BitsToF32(bits);
}

template <int kCopy>
__device__ __forceinline__ uint32_t CopyBits(float value) {
  return kCopy == kAdamBf16 ? F32ToBf16Bits(value) : F32ToF16Bits(value);
}

template <int kGrad, int kCopy>
__device__ __forceinline__ void UpdateOne(const AdamKernelArgs& a, float grad_scale, int64_t i) {
  float grad;
  if constexpr (kGrad == kAdamF32) {
    grad = __ldcs(static_cast<const float*>(a.grads) + i);
  } else {
    grad = GradToF32<kGrad>(__ldcs(static_cast<const unsigned short*>(a.grads) + i));
  }
  float p = a.params[i];
  float m = a.exp_avg[i];
  float v = a.exp_avg_sq[i];
  UpdateElement(a.constants, grad_scale, grad, p, m, v);
  __stcs(a.params + i, p);
  __stcs(a.exp_avg + i, m);
  __stcs(a.exp_avg_sq + i, v);
  if constexpr (kCopy != kAdamNone) {
    __stcs(static_cast<unsigned short*>(a.param_copy) + i,
           static_cast<unsigned short>(CopyBits<kCopy>(p)));
  }
}

// Elements [i, i + 4) with 128-bit (fp32) and 64-bit (16-bit) accesses; i is a multiple of 4.
template <int kGrad, int kCopy>
__device__ __forceinline__ void UpdateFour(const AdamKernelArgs& a, float grad_scale, int64_t i) {
  float g[kVec];
  if constexpr (kGrad == kAdamF32) {
    const float4 g4 =
        __ldcs(reinterpret_cast<const float4*>(static_cast<const float*>(a.grads) + i));
    g[0] = g4.x;
    g[1] = g4.y;
    g[2] = g4.z;
    g[3] = g4.w;
  } else {
    // Little-endian: element i is the low half of the first word.
    const uint2 g2 =
        __ldcs(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(a.grads) + i));
    g[0] = GradToF32<kGrad>(static_cast<uint16_t>(g2.x & 0xffffu));
    g[1] = GradToF32<kGrad>(static_cast<uint16_t>(g2.x >> 16));
    g[2] = GradToF32<kGrad>(static_cast<uint16_t>(g2.y & 0xffffu));
    g[3] = GradToF32<kGrad>(static_cast<uint16_t>(g2.y >> 16));
  }
  float4 p = *reinterpret_cast<const float4*>(a.params + i);
  float4 m = *reinterpret_cast<const float4*>(a.exp_avg + i);
  float4 v = *reinterpret_cast<const float4*>(a.exp_avg_sq + i);
  UpdateElement(a.constants, grad_scale, g[0], p.x, m.x, v.x);
  UpdateElement(a.constants, grad_scale, g[1], p.y, m.y, v.y);
  UpdateElement(a.constants, grad_scale, g[2], p.z, m.z, v.z);
  UpdateElement(a.constants, grad_scale, g[3], p.w, m.w, v.w);
  __stcs(reinterpret_cast<float4*>(a.params + i), p);
  __stcs(reinterpret_cast<float4*>(a.exp_avg + i), m);
  __stcs(reinterpret_cast<float4*>(a.exp_avg_sq + i), v);
  if constexpr (kCopy != kAdamNone) {
    const uint2 c2 = make_uint2(CopyBits<kCopy>(p.x) | (CopyBits<kCopy>(p.y) << 16),
                                CopyBits<kCopy>(p.z) | (CopyBits<kCopy>(p.w) << 16));
    __stcs(reinterpret_cast<uint2*>(static_cast<uint16_t*>(a.param_copy) + i), c2);
  }
}

template <int kGrad, int kCopy, bool kVectorized>
__global__ void __launch_bounds__(kThreads) AdamKernel(const AdamKernelArgs a) {
  const float grad_scale =
      a.device_grad_scale != nullptr ? *a.device_grad_scale : a.constants.grad_scale;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVectorized) {
    const int64_t groups = a.count / kVec;
    for (int64_t group = thread; group < groups; group += stride) {
      UpdateFour<kGrad, kCopy>(a, grad_scale, group * kVec);
    }
    // The last count % 4 elements, one per thread of the first block.
    const int64_t tail = groups * kVec + thread;
    if (tail < a.count) UpdateOne<kGrad, kCopy>(a, grad_scale, tail);
  } else {
    for (int64_t i = thread; i < a.count; i += stride) UpdateOne<kGrad, kCopy>(a, grad_scale, i);
  }
}

template <int kGrad, int kCopy>
void Launch(const AdamKernelArgs& a, bool vectorized, cudaStream_t stream) {
  if (vectorized) {
    const unsigned blocks = GridFor((a.count + kVec - 1) / kVec, kThreads);
    AdamKernel<kGrad, kCopy, true><<<blocks, kThreads, 0, stream>>>(a);
  } else {
    AdamKernel<kGrad, kCopy, false><<<GridFor(a.count, kThreads), kThreads, 0, stream>>>(a);
  }
}

template <int kGrad>
void LaunchForGrad(const AdamKernelArgs& a, AdamCopyType copy_type, bool vectorized,
                   cudaStream_t stream) {
  switch (copy_type) {
    case AdamCopyType::kBF16:
      return Launch<kGrad, kAdamBf16>(a, vectorized, stream);
    case AdamCopyType::kF16:
      return Launch<kGrad, kAdamF16>(a, vectorized, stream);
    case AdamCopyType::kNone:
      return Launch<kGrad, kAdamNone>(a, vectorized, stream);
  }
}

LaunchStatus Step(const AdamTensors& t, const AdamHyperparams& hyper, float grad_scale,
                  const float* device_grad_scale, bool scale_on_device, cudaStream_t stream) {
  const std::string hyper_error = AdamHyperparamsError(hyper);
  SLUICE_CUDA_LAUNCH_REQUIRE(hyper_error.empty(), "AdamStep: " + hyper_error);
  const std::string tensors_error = AdamTensorsError(t);
  SLUICE_CUDA_LAUNCH_REQUIRE(tensors_error.empty(), "AdamStep: " + tensors_error);
  SLUICE_CUDA_LAUNCH_REQUIRE(!scale_on_device || device_grad_scale != nullptr || t.count == 0,
                             "AdamStepDeviceScale: grad_scale is null");
  if (t.count == 0) return LaunchStatus::Ok();

  AdamKernelArgs args{};
  args.params = t.params;
  args.exp_avg = t.exp_avg;
  args.exp_avg_sq = t.exp_avg_sq;
  args.grads = t.grads;
  args.param_copy = t.copy_type == AdamCopyType::kNone ? nullptr : t.param_copy;
  args.count = static_cast<int64_t>(t.count);
  args.device_grad_scale = scale_on_device ? device_grad_scale : nullptr;
  // The reference's own derivation, so the per-step scalars are the same floats on both sides.
  args.constants = MakeAdamStepConstants(hyper, grad_scale);
  const bool vectorized = Aligned(t.params, 16) && Aligned(t.exp_avg, 16) &&
                          Aligned(t.exp_avg_sq, 16) &&
                          Aligned(t.grads, 4 * AdamGradTypeSize(t.grad_type)) &&
                          (args.param_copy == nullptr || Aligned(args.param_copy, 8));
  switch (t.grad_type) {
    case AdamGradType::kF32:
      LaunchForGrad<kAdamF32>(args, t.copy_type, vectorized, stream);
      break;
    case AdamGradType::kBF16:
      LaunchForGrad<kAdamBf16>(args, t.copy_type, vectorized, stream);
      break;
    case AdamGradType::kF16:
      LaunchForGrad<kAdamF16>(args, t.copy_type, vectorized, stream);
      break;
  }
  return AfterLaunch("AdamStep");
}

}  // namespace

LaunchStatus AdamStep(const AdamTensors& t, const AdamHyperparams& hyper, float grad_scale,
                      cudaStream_t stream) {
  return Step(t, hyper, grad_scale, nullptr, false, stream);
}

LaunchStatus AdamStepDeviceScale(const AdamTensors& t, const AdamHyperparams& hyper,
                                 const float* grad_scale, cudaStream_t stream) {
  return Step(t, hyper, 1.0f, grad_scale, true, stream);
}

}  // namespace sluice::kernels::cuda
