// The f32 <-> bf16/f16 conversions of kernels/ref/half.h against the arithmetic model in
// float_reference.h, over every 16-bit pattern, every rounding midpoint and random f32 values.
#include "runtime/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>

#include "kernels/ref/half.h"
#include "tests/runtime/float_reference.h"

namespace sluice {
namespace {

using kernels::Bf16ToF32;
using kernels::F16ToF32;
using kernels::F32ToBf16;
using kernels::F32ToF16;
using testing::DecodeReference;
using testing::Format16;
using testing::IsNanPattern;
using testing::kBf16Format;
using testing::kF16Format;
using testing::NextMagnitudeReference;
using testing::RoundReference;
using testing::SignBit;

struct Conversion {
  const Format16* format;
  float (*to_f32)(uint16_t);
  uint16_t (*from_f32)(float);
};

// Names the parameter in gtest output instead of dumping its bytes.
void PrintTo(const Conversion& conversion, std::ostream* os) { *os << conversion.format->name; }

const Conversion kBf16{&kBf16Format, &Bf16ToF32, &F32ToBf16};
const Conversion kF16{&kF16Format, &F16ToF32, &F32ToF16};

std::string Hex(uint32_t bits) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%04x", bits);
  return text;
}

// Compares the conversion of x with the reference rounding; returns a failure description.
::testing::AssertionResult ConvertsLikeReference(const Conversion& conversion, float x) {
  const Format16& format = *conversion.format;
  uint16_t got = conversion.from_f32(x);
  uint32_t x_bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) {
    if (IsNanPattern(format, got) && SignBit(got) == std::signbit(x) &&
        (got & format.quiet_bit()) != 0) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << format.name << ": f32 NaN " << Hex(x_bits) << " gave "
                                         << Hex(got) << ", expected a quiet NaN with the same sign";
  }
  double expected = RoundReference(format, x);
  double got_value = DecodeReference(format, got);
  if (!IsNanPattern(format, got) && got_value == expected &&
      std::signbit(got_value) == std::signbit(expected)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << format.name << ": f32 " << Hex(x_bits) << " (" << x << ") gave " << Hex(got) << " ("
         << got_value << "), expected " << expected;
}

class DTypeConversionTest : public ::testing::TestWithParam<Conversion> {
 protected:
  void SetUp() override { ASSERT_EQ(std::fegetround(), FE_TONEAREST); }
};

TEST_P(DTypeConversionTest, ToF32MatchesReferenceForEveryPattern) {
  const Conversion& conversion = GetParam();
  const Format16& format = *conversion.format;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    uint16_t pattern = static_cast<uint16_t>(bits);
    float value = conversion.to_f32(pattern);
    if (IsNanPattern(format, pattern)) {
      ASSERT_TRUE(std::isnan(value)) << format.name << " " << Hex(bits);
      ASSERT_EQ(std::signbit(value), SignBit(pattern)) << format.name << " " << Hex(bits);
      continue;
    }
    double expected = DecodeReference(format, pattern);
    ASSERT_EQ(static_cast<double>(value), expected) << format.name << " " << Hex(bits);
    ASSERT_EQ(std::signbit(value), std::signbit(expected)) << format.name << " " << Hex(bits);
  }
}

TEST_P(DTypeConversionTest, RoundTripThroughF32IsIdentityAndKeepsNans) {
  const Conversion& conversion = GetParam();
  const Format16& format = *conversion.format;
  int nan_patterns = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    uint16_t pattern = static_cast<uint16_t>(bits);
    uint16_t back = conversion.from_f32(conversion.to_f32(pattern));
    if (IsNanPattern(format, pattern)) {
      ++nan_patterns;
      ASSERT_TRUE(IsNanPattern(format, back))
          << format.name << " " << Hex(bits) << " -> " << Hex(back);
      ASSERT_EQ(SignBit(back), SignBit(pattern)) << format.name << " " << Hex(bits);
      ASSERT_NE(back & format.quiet_bit(), 0) << format.name << " " << Hex(bits);
    } else {
      ASSERT_EQ(back, pattern) << format.name << " " << Hex(bits) << " -> " << Hex(back);
    }
  }
  // All exponent bits set and a nonzero mantissa, for both signs.
  EXPECT_EQ(nan_patterns, 2 * ((1 << format.mantissa_bits()) - 1));
}

// For every finite pattern t and the next larger magnitude t+1 (infinity's pattern after the
// largest finite number): the midpoint rounds to whichever has an even pattern, and the f32
// neighbours of the midpoint round to the nearer one.
TEST_P(DTypeConversionTest, MidpointsRoundToEvenAndNeighboursToNearer) {
  const Conversion& conversion = GetParam();
  const Format16& format = *conversion.format;
  int checked = 0;
  for (uint32_t bits = 0; bits < format.infinity_bits(); ++bits) {
    uint16_t low = static_cast<uint16_t>(bits);
    uint16_t high = static_cast<uint16_t>(bits + 1);
    double midpoint = (DecodeReference(format, low) + NextMagnitudeReference(format, low)) / 2;
    float midpoint_f32 = static_cast<float>(midpoint);
    ASSERT_EQ(static_cast<double>(midpoint_f32), midpoint)
        << format.name << ": midpoint after " << Hex(bits) << " is not an f32";
    float below = std::nextafter(midpoint_f32, 0.0f);
    float above = std::nextafter(midpoint_f32, INFINITY);
    uint16_t tie = (low & 1u) == 0 ? low : high;
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      float s = sign != 0 ? -1.0f : 1.0f;
      ASSERT_EQ(conversion.from_f32(s * midpoint_f32), sign | tie)
          << format.name << ": midpoint " << s * midpoint_f32 << " after " << Hex(bits);
      ASSERT_EQ(conversion.from_f32(s * below), sign | low)
          << format.name << ": below midpoint " << s * below << " after " << Hex(bits);
      ASSERT_EQ(conversion.from_f32(s * above), sign | high)
          << format.name << ": above midpoint " << s * above << " after " << Hex(bits);
      // The model agrees with the tie rule; a disagreement would point at the test itself.
      ASSERT_TRUE(ConvertsLikeReference(conversion, s * midpoint_f32));
      ASSERT_TRUE(ConvertsLikeReference(conversion, s * below));
      ASSERT_TRUE(ConvertsLikeReference(conversion, s * above));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * format.infinity_bits());
}

TEST_P(DTypeConversionTest, SpecialF32ValuesMatchReference) {
  const Conversion& conversion = GetParam();
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                  FLT_TRUE_MIN, -FLT_TRUE_MIN, 1.0f, -1.0f, 1.0f / 3.0f, 65504.0f, 65520.0f,
                  std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffc00000u),
                  std::bit_cast<float>(0x7fbfffffu), std::bit_cast<float>(0x7fffffffu)}) {
    EXPECT_TRUE(ConvertsLikeReference(conversion, x));
  }
}

TEST_P(DTypeConversionTest, RandomF32BitPatternsMatchReference) {
  const Conversion& conversion = GetParam();
  std::mt19937 rng(20240611);
  for (int i = 0; i < 3'000'000; ++i) {
    float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    ASSERT_TRUE(ConvertsLikeReference(conversion, x));
  }
}

// Uniform bit patterns rarely land where f16 rounds; these cover its exponent range densely.
TEST_P(DTypeConversionTest, RandomF32NearTheFormatsRangeMatchReference) {
  const Conversion& conversion = GetParam();
  const Format16& format = *conversion.format;
  std::mt19937 rng(7);
  int low = format.min_exponent - format.mantissa_bits() - 3;
  int high = std::min(format.max_exponent + 2, 127);
  std::uniform_int_distribution<int> exponent(low, high);
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t sign = rng() & 0x80000000u;
    uint32_t mantissa = rng() & 0x7fffffu;
    float magnitude =
        std::ldexp(1.0f + std::ldexp(static_cast<float>(mantissa), -23), exponent(rng));
    float x = std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
    ASSERT_TRUE(ConvertsLikeReference(conversion, x));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, DTypeConversionTest, ::testing::Values(kBf16, kF16),
                         [](const ::testing::TestParamInfo<Conversion>& info) {
                           return std::string(info.param.format->name);
                         });

TEST(F16ConversionTest, OverflowBoundaries) {
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);
  EXPECT_EQ(F32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // the tie goes to the even pattern: infinity
  EXPECT_EQ(F32ToF16(65536.0f), 0x7c00);
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16(FLT_MAX), 0x7c00);
  EXPECT_EQ(F32ToF16(INFINITY), 0x7c00);
  EXPECT_EQ(F32ToF16(-65504.0f), 0xfbff);
  EXPECT_EQ(F32ToF16(-65519.99f), 0xfbff);
  EXPECT_EQ(F32ToF16(-65520.0f), 0xfc00);
  EXPECT_EQ(F32ToF16(-INFINITY), 0xfc00);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x7c00), INFINITY);
  EXPECT_EQ(F16ToF32(0xfc00), -INFINITY);
}

TEST(F16ConversionTest, SmallestSubnormals) {
  const float ulp = 0x1p-24f;  // smallest f16 subnormal
  EXPECT_EQ(F16ToF32(0x0001), ulp);
  EXPECT_EQ(F16ToF32(0x8001), -ulp);
  EXPECT_EQ(F16ToF32(0x03ff), 1023 * ulp);
  EXPECT_EQ(F16ToF32(0x0400), 0x1p-14f);
  EXPECT_EQ(F32ToF16(ulp), 0x0001);
  EXPECT_EQ(F32ToF16(0.5f * ulp), 0x0000);  // tie between 0 and 1 ulp: even is 0
  EXPECT_EQ(F32ToF16(-0.5f * ulp), 0x8000);
  EXPECT_EQ(F32ToF16(std::nextafter(0.5f * ulp, 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(1.5f * ulp), 0x0002);     // tie between 1 and 2: even is 2
  EXPECT_EQ(F32ToF16(2.5f * ulp), 0x0002);     // tie between 2 and 3: even is 2
  EXPECT_EQ(F32ToF16(1023.5f * ulp), 0x0400);  // largest subnormal to smallest normal
  EXPECT_EQ(F32ToF16(FLT_TRUE_MIN), 0x0000);
  EXPECT_EQ(F32ToF16(-FLT_TRUE_MIN), 0x8000);
  EXPECT_EQ(F32ToF16(0x1p-26f), 0x0000);
}

TEST(Bf16ConversionTest, OverflowAndSubnormalBoundaries) {
  const float max_bf16 = std::bit_cast<float>(0x7f7f0000u);
  const float overflow_midpoint = std::bit_cast<float>(0x7f7f8000u);
  EXPECT_EQ(F32ToBf16(max_bf16), 0x7f7f);
  EXPECT_EQ(F32ToBf16(std::nextafter(overflow_midpoint, 0.0f)), 0x7f7f);
  EXPECT_EQ(F32ToBf16(overflow_midpoint), 0x7f80);  // tie: 0x7f7f is odd, infinity even
  EXPECT_EQ(F32ToBf16(FLT_MAX), 0x7f80);
  EXPECT_EQ(F32ToBf16(-FLT_MAX), 0xff80);
  EXPECT_EQ(F32ToBf16(0x1p-133f), 0x0001);  // smallest bf16 subnormal
  EXPECT_EQ(F32ToBf16(0x1p-134f), 0x0000);  // tie with zero
  EXPECT_EQ(F32ToBf16(std::nextafter(0x1p-134f, 1.0f)), 0x0001);
  EXPECT_EQ(F32ToBf16(FLT_TRUE_MIN), 0x0000);
  EXPECT_EQ(F32ToBf16(-FLT_TRUE_MIN), 0x8000);
  EXPECT_EQ(Bf16ToF32(0x0001), 0x1p-133f);
  EXPECT_EQ(F32ToBf16(1.0f + 0x1p-8f), 0x3f80);      // tie: 0x3f80 even
  EXPECT_EQ(F32ToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie between 0x3f81 and 0x3f82
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeName(DType::kF32), "f32");
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kF16), "f16");
}

TEST(DTypeTest, ParseRoundTripsNamesAndAcceptsAliases) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Result<DType> parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, dtype);
  }
  struct Alias {
    const char* name;
    DType dtype;
  };
  for (Alias alias :
       {Alias{"fp32", DType::kF32}, Alias{"float32", DType::kF32}, Alias{"float", DType::kF32},
        Alias{"bfloat16", DType::kBF16}, Alias{"fp16", DType::kF16}, Alias{"float16", DType::kF16},
        Alias{"half", DType::kF16}}) {
    Result<DType> parsed = ParseDType(alias.name);
    ASSERT_TRUE(parsed.ok()) << alias.name;
    EXPECT_EQ(*parsed, alias.dtype) << alias.name;
  }
}

TEST(DTypeTest, F64IsTheReferenceComputeDType) {
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeName(DType::kF64), "f64");
  for (const char* name : {"f64", "fp64", "float64", "double"}) {
    Result<DType> parsed = ParseDType(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, DType::kF64) << name;
  }
}

TEST(DTypeTest, UnknownNameIsAnErrorNamingItAndTheChoices) {
  Result<DType> parsed = ParseDType("int8");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("'int8'"), std::string::npos)
      << parsed.status().message();
  EXPECT_NE(parsed.status().message().find("f32, bf16 or f16"), std::string::npos)
      << parsed.status().message();
  EXPECT_FALSE(ParseDType("").ok());
}

}  // namespace
}  // namespace sluice
