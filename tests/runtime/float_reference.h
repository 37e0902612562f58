// An arithmetic model of the 16-bit float formats, independent of the bit tricks in
// kernels/ref/half.h: patterns are decoded from their IEEE fields with ldexp, and rounding is done
// in double by scaling the format's quantum to 1 and calling std::nearbyint (FE_TONEAREST rounds
// half to even). Every f32 value is exact in double, and so is every scaling used here.
#pragma once

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace sluice::testing {

struct Format16 {
  std::string_view name;
  int precision;      // significand bits, the implicit one included
  int exponent_bits;  // width of the exponent field
  int min_exponent;   // exponent of the smallest normal number
  int max_exponent;   // exponent of the largest finite number

  int mantissa_bits() const { return precision - 1; }
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  uint16_t infinity_bits() const {
    return static_cast<uint16_t>(((1u << exponent_bits) - 1) << mantissa_bits());
  }
  uint16_t quiet_bit() const { return static_cast<uint16_t>(1u << (mantissa_bits() - 1)); }
  double max_finite() const {
    return std::ldexp(2.0 - std::ldexp(1.0, 1 - precision), max_exponent);
  }
};

inline constexpr Format16 kBf16Format{"bf16", 8, 8, -126, 127};
inline constexpr Format16 kF16Format{"f16", 11, 5, -14, 15};

inline bool IsNanPattern(const Format16& format, uint16_t bits) {
  uint16_t magnitude = bits & 0x7fffu;
  return magnitude > format.infinity_bits();
}

inline bool SignBit(uint16_t bits) { return (bits & 0x8000u) != 0; }

// The value a pattern stands for (NaN patterns give a NaN).
inline double DecodeReference(const Format16& format, uint16_t bits) {
  const int mantissa_bits = format.mantissa_bits();
  const uint32_t exponent_field = (bits & 0x7fffu) >> mantissa_bits;
  const uint32_t mantissa = bits & ((1u << mantissa_bits) - 1);
  const uint32_t exponent_all_ones = (1u << format.exponent_bits) - 1;
  double magnitude;
  if (exponent_field == exponent_all_ones) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent_field == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), format.min_exponent - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>((1u << mantissa_bits) | mantissa),
                           static_cast<int>(exponent_field) - format.bias() - mantissa_bits);
  }
  return SignBit(bits) ? -magnitude : magnitude;
}

// x rounded to the format, to nearest with ties to even; overflow gives infinity. Requires the
// FE_TONEAREST rounding mode (the default).
inline double RoundReference(const Format16& format, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  double magnitude = std::fabs(x);
  int frexp_exponent;
  std::frexp(magnitude, &frexp_exponent);  // magnitude = m * 2^e, m in [0.5, 1)
  int exponent = std::max(frexp_exponent - 1, format.min_exponent);  // subnormals: fixed quantum
  double quantum = std::ldexp(1.0, exponent - format.mantissa_bits());
  double rounded = std::nearbyint(magnitude / quantum) * quantum;
  // IEEE overflow: the value rounded with an unbounded exponent exceeds the largest finite.
  if (rounded > format.max_finite()) rounded = INFINITY;
  return std::copysign(rounded, x);
}

// The value just above the pattern's magnitude: the next pattern's value, or for the largest
// finite number the power of two an unbounded exponent would give (where overflow rounds).
inline double NextMagnitudeReference(const Format16& format, uint16_t magnitude_bits) {
  uint16_t next = static_cast<uint16_t>(magnitude_bits + 1);
  if (next == format.infinity_bits()) return std::ldexp(1.0, format.max_exponent + 1);
  return DecodeReference(format, next);
}

}  // namespace sluice::testing
