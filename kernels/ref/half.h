// Scalar conversions between f32 and the 16-bit float types, round-to-nearest-even. They are the
// reference every vectorized conversion is tested against, and kernels use them for tails.
// NaNs stay NaN (quiet, sign kept); f16 overflow rounds to infinity; f16 subnormals are exact.
#pragma once

#include <bit>
#include <cstdint>

namespace sluice::kernels {

inline float Bf16ToF32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t F32ToBf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, payload top kept
  }
  // Adding 0x7fff plus the lowest kept bit rounds half to even; a carry into the exponent is
  // the correct rounding up to the next binade or to infinity.
  uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal f16: value = mantissa * 2^-24, exact in f32.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    bits = sign | std::bit_cast<uint32_t>(magnitude);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t F32ToF16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x1ffu);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in f16: scale so the f16 ulp (2^-24) becomes 1 and round
    // the integer part to nearest even; 0.5f = 2^-25 shifted in keeps the f32 add exact.
    float magnitude = std::bit_cast<float>(abs);
    float shifted = magnitude + 0.5f;  // ulp of 0.5f is 2^-24: the add rounds to nearest even
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(shifted) - 0x3f000000u);
  }
  uint32_t lsb = (abs >> 13) & 1u;
  uint32_t rounded = abs + 0xfffu + lsb;
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

}  // namespace sluice::kernels
