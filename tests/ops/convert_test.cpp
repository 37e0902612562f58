// The array conversions, CPU (AVX2 + F16C and portable paths) and reference, bit-exact with
// half.h: every 16-bit pattern for the widenings; for the narrowings the special values
// (signed zeros, infinities, NaNs with payloads, subnormals, rounding ties, overflow edges) and
// a million random bit patterns. Lengths are odd so the vector loops leave tails.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops_convert.h"
#include "kernels/ref/half.h"
#include "kernels/ref/ops_convert.h"

namespace sluice::kernels {
namespace {

std::vector<float> NarrowingInputs() {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,  // zeros, infinities
      0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fbfffffu,  // quiet and signalling NaNs
      0x00000001u, 0x807fffffu, 0x00800000u,               // f32 subnormals, smallest normal
      0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u,  // bf16 ties to even, near ties
      0x7f7fffffu, 0x7f7f8000u, 0xff7f8000u,               // overflow to bf16 infinity
      0x477fe000u, 0x477ff000u, 0x477fefffu,               // f16 max, tie to infinity
      0x38800000u, 0x33800000u, 0x33000000u, 0x33000001u,  // f16 min normal, subnormal edges
      0x387fc000u, 0x387fe000u,                            // f16 subnormal ties
  };
  std::mt19937 engine(400);
  for (int i = 0; i < (1 << 20) + 3; ++i) bits.push_back(engine());
  std::vector<float> values;
  for (uint32_t b : bits) values.push_back(std::bit_cast<float>(b));
  return values;
}

std::vector<uint16_t> AllHalfPatterns() {
  std::vector<uint16_t> values(65536 + 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint16_t>(i);
  return values;
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> out;
  for (float v : values) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

class ConvertTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() == Isa::kAvx2 && !DetectCpuFeatures().avx2) {
      GTEST_SKIP() << "this CPU has no AVX2 + F16C";
    }
    ForceIsa(GetParam());
  }
  void TearDown() override { ClearForcedIsa(); }
};

TEST_P(ConvertTest, F32ToBf16MatchesHalfH) {
  const std::vector<float> src = NarrowingInputs();
  std::vector<uint16_t> want(src.size()), got(src.size()), ref_got(src.size());
  for (size_t i = 0; i < src.size(); ++i) want[i] = F32ToBf16(src[i]);
  cpu::ConvertF32ToBf16(src.data(), got.data(), src.size());
  ref::ConvertF32ToBf16(src.data(), ref_got.data(), src.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(ref_got, want);
}

TEST_P(ConvertTest, F32ToF16MatchesHalfH) {
  const std::vector<float> src = NarrowingInputs();
  std::vector<uint16_t> want(src.size()), got(src.size()), ref_got(src.size());
  for (size_t i = 0; i < src.size(); ++i) want[i] = F32ToF16(src[i]);
  cpu::ConvertF32ToF16(src.data(), got.data(), src.size());
  ref::ConvertF32ToF16(src.data(), ref_got.data(), src.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(ref_got, want);
}

TEST_P(ConvertTest, Bf16AndF16ToF32MatchHalfHForEveryPattern) {
  const std::vector<uint16_t> src = AllHalfPatterns();
  std::vector<float> want(src.size()), got(src.size()), ref_got(src.size());
  for (size_t i = 0; i < src.size(); ++i) want[i] = Bf16ToF32(src[i]);
  cpu::ConvertBf16ToF32(src.data(), got.data(), src.size());
  ref::ConvertBf16ToF32(src.data(), ref_got.data(), src.size());
  EXPECT_EQ(Bits(got), Bits(want));
  EXPECT_EQ(Bits(ref_got), Bits(want));
  for (size_t i = 0; i < src.size(); ++i) want[i] = F16ToF32(src[i]);
  cpu::ConvertF16ToF32(src.data(), got.data(), src.size());
  ref::ConvertF16ToF32(src.data(), ref_got.data(), src.size());
  EXPECT_EQ(Bits(got), Bits(want));
  EXPECT_EQ(Bits(ref_got), Bits(want));
}

TEST_P(ConvertTest, ThreadedConversionEqualsSingleThreaded) {
  const std::vector<float> src = NarrowingInputs();
  std::vector<uint16_t> one(src.size()), three(src.size());
  cpu::ConvertF32ToBf16(src.data(), one.data(), src.size(), 1);
  cpu::ConvertF32ToBf16(src.data(), three.data(), src.size(), 3);
  EXPECT_EQ(one, three);
}

INSTANTIATE_TEST_SUITE_P(Isas, ConvertTest, ::testing::Values(Isa::kScalar, Isa::kAvx2),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace sluice::kernels
