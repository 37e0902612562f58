// Device twins of kernels/ref/half.h: conversions between f32 and the bits of bf16 / f16, round to
// nearest even, NaN kept quiet with its sign and top payload, f16 overflow to infinity, f16
// subnormals exact. They repeat the reference's integer arithmetic step for step rather than use
// __float2bfloat16_rn / __float2half_rn, whose NaN results are canonical (0x7fff) and would break
// bitwise parity with the CPU backends. Included by .cu files of kernels/cuda only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sluice::kernels::cuda::internal {

__device__ __forceinline__ float Bf16BitsToF32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t F32ToBf16Bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

__device__ __forceinline__ float F16BitsToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // mantissa * 2^-24 is a normal f32 and exact, so neither rounding nor flushing can apply.
    const float magnitude = __fmul_rn(__uint2float_rn(mantissa), 0x1p-24f);
    bits = sign | __float_as_uint(magnitude);
  }
  return __uint_as_float(bits);
}

__device__ __forceinline__ uint16_t F32ToF16Bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x1ffu);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  if (abs < 0x38800000u) {
    // The f16 ulp 2^-24 is the ulp of 0.5f, so one round-to-nearest-even add does the rounding.
    // An f32 subnormal input would round to +0 either way, so flush-to-zero cannot change this.
    const float shifted = __fadd_rn(__uint_as_float(abs), 0.5f);
    return sign | static_cast<uint16_t>(__float_as_uint(shifted) - 0x3f000000u);
  }
  const uint32_t lsb = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xfffu + lsb;
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

}  // namespace sluice::kernels::cuda::internal
