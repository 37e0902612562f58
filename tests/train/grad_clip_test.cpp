// Global gradient norm, overflow detection and the clip coefficient.
#include "engine/train/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/train/precision.h"
#include "engine/zero/shard_grad_norm.h"

namespace sluice::train {
namespace {

TEST(GradClipTest, NormOfAKnownVectorUnscaled) {
  std::vector<float> g = {3.0f, 0.0f, -4.0f};
  GradNorm n = GlobalGradNorm(g.data(), 3, 1.0, 1);
  EXPECT_TRUE(n.finite);
  EXPECT_DOUBLE_EQ(n.norm, 5.0);
  // Gradients of a loss scaled by 1024: the norm is reported for the unscaled gradient.
  for (float& x : g) x *= 1024.0f;
  EXPECT_DOUBLE_EQ(GlobalGradNorm(g.data(), 3, 1.0 / 1024.0, 1).norm, 5.0);
}

TEST(GradClipTest, InfOrNanAnywhereIsAnOverflow) {
  std::vector<float> g(100000, 0.5f);
  EXPECT_TRUE(GlobalGradNorm(g.data(), g.size(), 1.0, 2).finite);
  g[77777] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(GlobalGradNorm(g.data(), g.size(), 1.0, 2).finite);
  g[77777] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(GlobalGradNorm(g.data(), g.size(), 1.0, 2).finite);
}

TEST(GradClipTest, NormIsBitIdenticalForAnyThreadCount) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> g(1000003);
  for (float& x : g) x = normal(rng);
  const double one = GlobalGradNorm(g.data(), g.size(), 1.0, 1).norm;
  for (int threads : {2, 3, 4}) {
    const double many = GlobalGradNorm(g.data(), g.size(), 1.0, threads).norm;
    EXPECT_EQ(std::memcmp(&one, &many, sizeof(double)), 0) << threads << " threads";
  }
}

TEST(GradClipTest, ClipCoefficientMatchesPyTorch) {
  EXPECT_DOUBLE_EQ(zero::ClipCoefficient(5.0, 1.0), 1.0 / (5.0 + 1e-6));
  EXPECT_DOUBLE_EQ(zero::ClipCoefficient(0.5, 1.0), 1.0);
  // At exactly max_norm the gradient is still scaled by 1 / (1 + 1e-6), as in PyTorch.
  EXPECT_DOUBLE_EQ(zero::ClipCoefficient(1.0, 1.0), 1.0 / (1.0 + 1e-6));
}

TEST(GradClipTest, ClippingOffOrNonFiniteNormGivesOne) {
  EXPECT_DOUBLE_EQ(zero::ClipCoefficient(1e6, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(zero::ClipCoefficient(std::numeric_limits<double>::infinity(), 1.0), 1.0);
}

TEST(PrecisionTest, RoundToF16OverflowsPast65504) {
  std::vector<float> v = {1.0f, 65504.0f, 65520.0f, 70000.0f, -1e6f, 1.0f + 1.0f / 4096, 1e-8f};
  RoundToF16InPlace(v.data(), static_cast<int64_t>(v.size()), 1);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 65504.0f);
  EXPECT_TRUE(std::isinf(v[2]));  // rounds up past the largest fp16
  EXPECT_TRUE(std::isinf(v[3]));
  EXPECT_TRUE(std::isinf(v[4]) && v[4] < 0);
  EXPECT_EQ(v[5], 1.0f);  // below half an fp16 ulp (2^-11) of 1
  EXPECT_EQ(v[6], 0.0f);  // below the smallest fp16 subnormal
}

TEST(PrecisionTest, ModesMapToStorage) {
  EXPECT_EQ(PrecisionOf(DType::kBF16), Precision::kBF16);
  EXPECT_EQ(ModelParamDType(Precision::kBF16), DType::kBF16);
  EXPECT_EQ(ModelParamDType(Precision::kF16), DType::kF32);
}

}  // namespace
}  // namespace sluice::train
