// CPU Lion: every variant against the scalar reference bit for bit over multi-step runs, for every
// gradient and copy dtype, odd sizes and unaligned starts; hand-computed steps; sign(0) and NaN;
// the copy's rounding; argument checks; dispatch.
#include "kernels/cpu/lion.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/lion_ref.h"
#include "tests/kernels/optimizer_test_util.h"

namespace sluice::kernels {
namespace {

using optimizer_test::AllIsas;
using optimizer_test::CaseName;
using optimizer_test::CaseParam;
using optimizer_test::CopyRoundingBits;
using optimizer_test::ExpectCopyIsRneOfParams;
using optimizer_test::ExpectCopyRoundsLikeHalfH;
using optimizer_test::FirstBitMismatch;
using optimizer_test::IsaParamName;
using optimizer_test::IsaScope;
using optimizer_test::ReferenceCases;

// p, m, the gradient and the copy of one optimizer, at chosen misalignments.
struct LionState : optimizer_test::OptimizerBuffers {
  LionState(size_t n, AdamGradType grad_type, AdamCopyType copy_type, bool aligned)
      : OptimizerBuffers(n, grad_type, copy_type, aligned, /*seed=*/4321 + n,
                         /*second_moment=*/false) {}

  LionTensors Tensors() {
    return LionTensors{.params = params.f32(),
                       .exp_avg = exp_avg.f32(),
                       .grads = grads.data(),
                       .grad_type = grad_type,
                       .param_copy = CopyOrNull(),
                       .copy_type = copy_type,
                       .count = count};
  }
};

class LionVsReference : public ::testing::TestWithParam<CaseParam> {};

TEST_P(LionVsReference, MultiStepMatchesReferenceBitForBit) {
  auto [isa, grad_type, copy_type, n, aligned] = GetParam();
  SKIP_WITHOUT(isa);
  IsaScope scope(isa);
  ASSERT_EQ(LionIsa(), isa);

  for (float weight_decay : {0.0f, 0.1f}) {
    SCOPED_TRACE("weight_decay " + std::to_string(weight_decay));
    LionState kernel(n, grad_type, copy_type, aligned);
    LionState reference(n, grad_type, copy_type, /*aligned=*/true);
    const LionHyperparams hyper{
        .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = weight_decay};
    const AdamThreading threading{.num_threads = 3};
    const float grad_scale = 0.5f;  // e.g. loss-scale inverse times clip coefficient
    for (uint32_t step = 1; step <= 4; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      kernel.SetGrads(step);
      reference.SetGrads(step);
      LionStep(kernel.Tensors(), hyper, grad_scale, threading);
      LionStepReference(reference.Tensors(), hyper, grad_scale);

      EXPECT_EQ(FirstBitMismatch(kernel.params.f32(), reference.params.f32(), n), -1) << "params";
      EXPECT_EQ(FirstBitMismatch(kernel.exp_avg.f32(), reference.exp_avg.f32(), n), -1) << "m";
      ExpectCopyIsRneOfParams(kernel);
      EXPECT_TRUE(kernel.GuardsIntact()) << "a write landed outside the tensors";
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, LionVsReference,
                         // tails around 8 and 16 lanes and the 32-element body, several tiles
                         ReferenceCases(::testing::Values(size_t{1}, size_t{7}, size_t{17},
                                                          size_t{95}, size_t{1000003})),
                         CaseName);

class LionPerIsa : public ::testing::TestWithParam<Isa> {};

INSTANTIATE_TEST_SUITE_P(AllVariants, LionPerIsa, AllIsas(), IsaParamName);

// Betas 0.5 and 0.9375 are exact in binary. p = 1, m = 0, grad = 1 scaled by 0.5 (g = 0.5),
// lr = 0.1, weight decay 0.1 (p is first multiplied by 1 - 0.01 = 0.99).
// Step 1: p = 0.99; c = 0.5 * 0 + 0.5 * 0.5 = 0.25 > 0, so p = 0.99 - 0.1 = 0.89;
//   m = 0.9375 * 0 + 0.0625 * 0.5 = 0.03125.
// Step 2, grad -1 (g = -0.5): p = 0.89 * 0.99 = 0.8811; c = 0.015625 - 0.25 < 0, so
//   p = 0.8811 + 0.1 = 0.9811; m = 0.029296875 - 0.03125 = -0.001953125.
// Step 3, grad 2^-8 (g = 2^-9): the momentum decides: c = 0.5 * -0.001953125 + 0.5 * 2^-9
//   = -0.0009765625 + 0.0009765625 = 0 exactly, so only the decay acts: p = 0.9811 * 0.99;
//   m = 0.9375 * -0.001953125 + 0.0625 * 2^-9 = -0.0018310546875 + 0.0001220703125.
TEST_P(LionPerIsa, MatchesHandComputedSteps) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  constexpr size_t n = 45;  // vector body and scalar tail both see the same values
  std::vector<float> p(n, 1.0f), m(n, 0.0f), g(n, 1.0f);
  LionTensors t{.params = p.data(), .exp_avg = m.data(), .grads = g.data(), .count = n};
  const LionHyperparams hyper{.lr = 0.1f, .beta1 = 0.5f, .beta2 = 0.9375f, .weight_decay = 0.1f};
  struct Expected {
    float grad;
    double p, m;
  };
  for (const Expected& e : {Expected{1.0f, 0.89, 0.03125}, Expected{-1.0f, 0.9811, -0.001953125},
                            Expected{0x1p-8f, 0.9811 * 0.99, -0.0017089843750}}) {
    SCOPED_TRACE("grad " + std::to_string(e.grad));
    std::fill(g.begin(), g.end(), e.grad);
    LionStep(t, hyper, 0.5f);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], e.p, 1e-6 * e.p) << i;
      ASSERT_NEAR(m[i], e.m, 1e-6 * std::fabs(e.m)) << i;
    }
  }
}

// sign(0) = 0: a parameter with zero gradient and zero momentum (ZeRO's padding, a row never
// seen) stays bit for bit where it is, -0 included; a NaN gradient makes the parameter NaN (as
// torch's sign does) instead of moving it by a finite step.
TEST_P(LionPerIsa, ZeroDirectionKeepsTheParameterAndNanPropagates) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  constexpr size_t n = 70;
  std::vector<float> p(n), m(n, 0.0f), g(n, 0.0f);
  for (size_t i = 0; i < n; ++i) p[i] = i % 3 == 0 ? -0.0f : 0.25f * static_cast<float>(i);
  const std::vector<float> before = p;
  g[5] = NAN;
  g[40] = NAN;
  LionTensors t{.params = p.data(), .exp_avg = m.data(), .grads = g.data(), .count = n};
  LionStep(t, LionHyperparams{.lr = 0.5f}, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    if (i == 5 || i == 40) {
      EXPECT_TRUE(std::isnan(p[i])) << i;
      EXPECT_TRUE(std::isnan(m[i])) << i;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(p[i]), std::bit_cast<uint32_t>(before[i])) << i;
      EXPECT_EQ(m[i], 0.0f) << i;
    }
  }
}

// With lr = 0 the parameters keep their values, so the copy shows the conversion alone: NaNs,
// infinities, subnormals, ties, f16 overflow and random bit patterns must round exactly as
// kernels/ref/half.h does.
TEST_P(LionPerIsa, CopyRoundsToNearestEvenBitForBit) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  const std::vector<uint32_t> bits = CopyRoundingBits(11);
  const size_t n = bits.size();
  for (AdamCopyType copy_type : {AdamCopyType::kBF16, AdamCopyType::kF16}) {
    SCOPED_TRACE(AdamCopyTypeName(copy_type));
    std::vector<float> p(n), m(n, 0.0f), g(n, 0.25f);
    for (size_t i = 0; i < n; ++i) p[i] = std::bit_cast<float>(bits[i]);
    std::vector<uint16_t> copy(n, 0);
    LionTensors t{.params = p.data(),
                  .exp_avg = m.data(),
                  .grads = g.data(),
                  .param_copy = copy.data(),
                  .copy_type = copy_type,
                  .count = n};
    LionStep(t, LionHyperparams{.lr = 0.0f}, 1.0f);
    ASSERT_NO_FATAL_FAILURE(ExpectCopyRoundsLikeHalfH(bits, p, copy, copy_type));
  }
}

TEST(LionDispatch, ForceIsaLowersTheVariant) {
  optimizer_test::ExpectForceIsaLowersTheVariant(&LionIsa);
}

TEST(LionArgs, ValidCallsHaveNoError) {
  std::vector<float> p(5), m(5), g(5);
  std::vector<uint16_t> copy(5);
  LionTensors t{.params = p.data(),
                .exp_avg = m.data(),
                .grads = g.data(),
                .param_copy = copy.data(),
                .copy_type = AdamCopyType::kBF16,
                .count = 5};
  EXPECT_EQ(LionStepArgsError(t, {}, {}), "");
  EXPECT_EQ(LionStepArgsError(LionTensors{}, {}, {}), "") << "count 0 needs no buffers";
  LionStep(LionTensors{}, {}, 1.0f);  // and does nothing
}

TEST(LionArgs, ErrorsNameTheField) {
  std::vector<float> p(8), m(8), g(8);
  std::vector<uint16_t> copy(8);
  const LionTensors good{.params = p.data(), .exp_avg = m.data(), .grads = g.data(), .count = 8};
  auto error_of = [&](LionTensors t, LionHyperparams h, AdamThreading th = {}) {
    return LionStepArgsError(t, h, th);
  };
  LionTensors t = good;
  t.exp_avg = nullptr;
  EXPECT_NE(error_of(t, {}).find("exp_avg is null"), std::string::npos) << error_of(t, {});
  t = good;
  t.params = reinterpret_cast<float*>(reinterpret_cast<char*>(p.data()) + 1);
  EXPECT_NE(error_of(t, {}).find("params"), std::string::npos);
  EXPECT_NE(error_of(t, {}).find("not aligned"), std::string::npos);
  t = good;
  t.copy_type = AdamCopyType::kF16;
  EXPECT_NE(error_of(t, {}).find("param_copy is null"), std::string::npos);
  t = good;
  t.param_copy = copy.data();
  EXPECT_NE(error_of(t, {}).find("copy_type is none"), std::string::npos);
  EXPECT_NE(error_of(good, {.beta1 = 1.0f}).find("beta1"), std::string::npos);
  EXPECT_NE(error_of(good, {.beta2 = -0.5f}).find("beta2"), std::string::npos);
  EXPECT_NE(error_of(good, {.lr = INFINITY}).find("lr"), std::string::npos);
  EXPECT_NE(error_of(good, {.weight_decay = -1.0f}).find("weight_decay"), std::string::npos);
  EXPECT_NE(error_of(good, {}, {.num_threads = -2}).find("num_threads"), std::string::npos);
}

TEST(LionArgsDeathTest, StepAbortsOnInvalidArguments) {
  std::vector<float> p(8), m(8), g(8);
  LionTensors t{.params = p.data(),
                .exp_avg = m.data(),
                .grads = g.data(),
                .copy_type = AdamCopyType::kBF16,
                .count = 8};
  EXPECT_DEATH(LionStep(t, {}, 1.0f), "param_copy is null");
}

}  // namespace
}  // namespace sluice::kernels
