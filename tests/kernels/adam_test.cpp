// CPU Adam: every variant against the scalar reference over multi-step runs, for every gradient
// and copy dtype, odd sizes and unaligned starts; hand-computed Adam vs AdamW; the copy's
// rounding; argument checks; dispatch.
#include "kernels/cpu/adam.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/adam_ref.h"
#include "kernels/ref/half.h"
#include "tests/kernels/optimizer_test_util.h"

namespace sluice::kernels {
namespace {

constexpr double kRelativeTolerance = 1e-6;  // declared fp32 tolerance against the reference

using optimizer_test::AllIsas;
using optimizer_test::CaseName;
using optimizer_test::CaseParam;
using optimizer_test::CopyRoundingBits;
using optimizer_test::ExpectCopyIsRneOfParams;
using optimizer_test::ExpectCopyRoundsLikeHalfH;
using optimizer_test::IsaParamName;
using optimizer_test::IsaScope;
using optimizer_test::ReferenceCases;

// All state of one optimizer: p, m, v, the gradient and the copy, at chosen misalignments.
struct AdamState : optimizer_test::OptimizerBuffers {
  AdamState(size_t n, AdamGradType grad_type, AdamCopyType copy_type, bool aligned)
      : OptimizerBuffers(n, grad_type, copy_type, aligned, /*seed=*/1234 + n,
                         /*second_moment=*/true) {}

  AdamTensors Tensors() {
    return AdamTensors{params.f32(), exp_avg.f32(), exp_avg_sq.f32(), grads.data(),
                       grad_type,    CopyOrNull(),  copy_type,        count};
  }
};

bool BitwiseOrRelativeClose(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (a == b) return true;
  return std::fabs(double{a} - b) <= kRelativeTolerance * std::max(std::fabs(a), std::fabs(b));
}

// Index of the first element outside tolerance, or -1.
int64_t FirstMismatch(const float* got, const float* want, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!BitwiseOrRelativeClose(got[i], want[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

class AdamVsReference : public ::testing::TestWithParam<CaseParam> {};

TEST_P(AdamVsReference, MultiStepAdamAndAdamWMatchReference) {
  auto [isa, grad_type, copy_type, n, aligned] = GetParam();
  SKIP_WITHOUT(isa);
  IsaScope scope(isa);
  ASSERT_EQ(AdamIsa(), isa);

  for (bool adamw : {false, true}) {
    SCOPED_TRACE(adamw ? "AdamW" : "Adam (L2)");
    AdamState kernel(n, grad_type, copy_type, aligned);
    AdamState reference(n, grad_type, copy_type, /*aligned=*/true);
    AdamHyperparams hyper{.lr = 1e-2f, .weight_decay = 0.05f, .adamw_mode = adamw};
    AdamThreading threading{.num_threads = 3};
    const float grad_scale = 0.5f;  // e.g. loss-scale inverse times clip coefficient
    for (int64_t step = 1; step <= 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      hyper.step = step;
      kernel.SetGrads(static_cast<uint32_t>(step));
      reference.SetGrads(static_cast<uint32_t>(step));
      AdamStep(kernel.Tensors(), hyper, grad_scale, threading);
      AdamStepReference(reference.Tensors(), hyper, grad_scale);

      EXPECT_EQ(FirstMismatch(kernel.params.f32(), reference.params.f32(), n), -1) << "params";
      EXPECT_EQ(FirstMismatch(kernel.exp_avg.f32(), reference.exp_avg.f32(), n), -1) << "m";
      EXPECT_EQ(FirstMismatch(kernel.exp_avg_sq.f32(), reference.exp_avg_sq.f32(), n), -1) << "v";
      ExpectCopyIsRneOfParams(kernel);
      EXPECT_TRUE(kernel.GuardsIntact()) << "a write landed outside the tensors";
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, AdamVsReference,
                         // tails around 8 and 16 lanes and the 32-element body, several tiles
                         ReferenceCases(::testing::Values(size_t{1}, size_t{7}, size_t{17},
                                                          size_t{95}, size_t{1000003})),
                         CaseName);

class AdamPerIsa : public ::testing::TestWithParam<Isa> {};

INSTANTIATE_TEST_SUITE_P(AllVariants, AdamPerIsa, AllIsas(), IsaParamName);

// Betas 0.5 and 0.9375 are exact in binary, so these hand-worked values hold to float rounding.
// p = 1, grad = 1 scaled by 0.5 (g = 0.5), lr = 0.1, eps = 1e-8, weight decay 0.1.
// Step 1, Adam (L2): g = 0.5 + 0.1 * 1 = 0.6, m = 0.5 * 0.6 = 0.3, v = 0.0625 * 0.36 = 0.0225,
//   m^ = 0.3 / 0.5 = 0.6, sqrt(v^) = sqrt(0.0225 / 0.0625) = 0.6,
//   p = 1 - 0.1 * 0.6 / (0.6 + 1e-8) = 0.900000001667.
// Step 1, AdamW: p = 1 * (1 - 0.1 * 0.1) = 0.99, m = 0.25, v = 0.015625, m^ = 0.5,
//   sqrt(v^) = 0.5, p = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.890000002.
// Step 2, grad -1 (g = -0.5), Adam: g = -0.5 + 0.1 * 0.9 = -0.41, m = 0.15 - 0.205 = -0.055,
//   v = 0.9375 * 0.0225 + 0.0625 * 0.1681 = 0.0316, bias corrections 0.75 and 0.12109375,
//   p = 0.9 + (0.1 / 0.75) * 0.055 / (sqrt(0.0316 / 0.12109375) + 1e-8) = 0.914355515432.
// Step 2, AdamW: p = 0.890000002 * 0.99, m = 0.125 - 0.25 = -0.125,
//   v = 0.9375 * 0.015625 + 0.0625 * 0.25 = 0.0302734375, p = 0.914433334647.
TEST_P(AdamPerIsa, AdamAndAdamWMatchHandComputedSteps) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  struct Expected {
    bool adamw;
    double p1, m1, v1, p2, m2, v2;
  };
  for (const Expected& e :
       {Expected{false, 0.900000001667, 0.3, 0.0225, 0.914355515432, -0.055, 0.0316},
        Expected{true, 0.890000002, 0.25, 0.015625, 0.914433334647, -0.125, 0.0302734375}}) {
    SCOPED_TRACE(e.adamw ? "AdamW" : "Adam");
    constexpr size_t n = 45;  // vector body and scalar tail both see the same values
    std::vector<float> p(n, 1.0f), m(n, 0.0f), v(n, 0.0f), g(n, 1.0f);
    AdamTensors t{
        p.data(), m.data(), v.data(), g.data(), AdamGradType::kF32, nullptr, AdamCopyType::kNone,
        n};
    AdamHyperparams hyper{.lr = 0.1f,
                          .beta1 = 0.5f,
                          .beta2 = 0.9375f,
                          .weight_decay = 0.1f,
                          .adamw_mode = e.adamw,
                          .step = 1};
    AdamStep(t, hyper, 0.5f);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], e.p1, 1e-6 * e.p1) << i;
      ASSERT_NEAR(m[i], e.m1, 1e-6 * std::fabs(e.m1)) << i;
      ASSERT_NEAR(v[i], e.v1, 1e-6 * e.v1) << i;
    }
    std::fill(g.begin(), g.end(), -1.0f);
    hyper.step = 2;
    AdamStep(t, hyper, 0.5f);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], e.p2, 1e-6 * e.p2) << i;
      ASSERT_NEAR(m[i], e.m2, 1e-6 * std::fabs(e.m2)) << i;
      ASSERT_NEAR(v[i], e.v2, 1e-6 * e.v2) << i;
    }
  }
}

// Without bias correction (and no weight decay): m = 0.25, v = 0.015625,
// p = 1 - 0.1 * 0.25 / (sqrt(0.015625) + 1e-8) = 0.800000016; with it, p would be 0.9.
TEST_P(AdamPerIsa, BiasCorrectionOffMatchesHandComputedStep) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  constexpr size_t n = 40;
  std::vector<float> p(n, 1.0f), m(n, 0.0f), v(n, 0.0f), g(n, 0.5f);
  AdamTensors t{
      p.data(), m.data(), v.data(), g.data(), AdamGradType::kF32, nullptr, AdamCopyType::kNone, n};
  AdamStep(t,
           AdamHyperparams{.lr = 0.1f,
                           .beta1 = 0.5f,
                           .beta2 = 0.9375f,
                           .adamw_mode = false,
                           .bias_correction = false},
           1.0f);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], 0.800000016, 1e-6) << i;
}

// With lr = 0 the parameters keep their values, so the copy shows the conversion alone: NaNs,
// infinities, subnormals, ties, f16 overflow and random bit patterns must round exactly as
// kernels/ref/half.h does.
TEST_P(AdamPerIsa, CopyRoundsToNearestEvenBitForBit) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  const std::vector<uint32_t> bits = CopyRoundingBits(7);
  const size_t n = bits.size();
  for (AdamCopyType copy_type : {AdamCopyType::kBF16, AdamCopyType::kF16}) {
    SCOPED_TRACE(AdamCopyTypeName(copy_type));
    std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n, 0.25f);
    for (size_t i = 0; i < n; ++i) p[i] = std::bit_cast<float>(bits[i]);
    std::vector<uint16_t> copy(n, 0);
    AdamTensors t{p.data(),           m.data(),    v.data(),  g.data(),
                  AdamGradType::kF32, copy.data(), copy_type, n};
    AdamStep(t, AdamHyperparams{.lr = 0.0f}, 1.0f);
    ASSERT_NO_FATAL_FAILURE(ExpectCopyRoundsLikeHalfH(bits, p, copy, copy_type));
  }
}

// The probe must do the step's loads and stores: every element read and written, the copy too.
TEST_P(AdamPerIsa, MemoryProbeTouchesEveryElement) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  const size_t n = 100003;
  AdamState state(n, AdamGradType::kBF16, AdamCopyType::kBF16, /*aligned=*/false);
  state.SetGrads(9);
  std::vector<float> p0(state.params.f32(), state.params.f32() + n);
  AdamMemoryProbe(state.Tensors(), AdamThreading{.num_threads = 2});
  for (size_t i = 0; i < n; ++i) {
    float g = Bf16ToF32(state.grads.u16()[i]);
    ASSERT_EQ(state.params.f32()[i], p0[i] + g) << i;
    ASSERT_EQ(state.exp_avg.f32()[i], g) << i;
    ASSERT_EQ(state.exp_avg_sq.f32()[i], std::fabs(g)) << i;
    ASSERT_EQ(state.copy.u16()[i], std::bit_cast<uint32_t>(state.params.f32()[i]) >> 16) << i;
  }
  EXPECT_TRUE(state.GuardsIntact());
}

TEST(AdamDispatch, ForceIsaLowersTheVariant) {
  optimizer_test::ExpectForceIsaLowersTheVariant(&AdamIsa);
}

TEST(AdamArgs, ValidCallsHaveNoError) {
  std::vector<float> p(5), m(5), v(5), g(5);
  std::vector<uint16_t> copy(5);
  AdamTensors t{
      p.data(), m.data(), v.data(), g.data(), AdamGradType::kF32, copy.data(), AdamCopyType::kBF16,
      5};
  EXPECT_EQ(AdamStepArgsError(t, {}, {}), "");
  EXPECT_EQ(AdamStepArgsError(AdamTensors{}, {}, {}), "") << "count 0 needs no buffers";
  AdamStep(AdamTensors{}, {}, 1.0f);  // and does nothing
}

TEST(AdamArgs, ErrorsNameTheField) {
  std::vector<float> p(8), m(8), v(8), g(8);
  std::vector<uint16_t> copy(8);
  const AdamTensors good{
      p.data(), m.data(), v.data(), g.data(), AdamGradType::kF32, nullptr, AdamCopyType::kNone, 8};
  auto error_of = [&](AdamTensors t, AdamHyperparams h, AdamThreading th = {}) {
    return AdamStepArgsError(t, h, th);
  };
  AdamTensors t = good;
  t.exp_avg_sq = nullptr;
  EXPECT_NE(error_of(t, {}).find("exp_avg_sq is null"), std::string::npos) << error_of(t, {});
  t = good;
  t.params = reinterpret_cast<float*>(reinterpret_cast<char*>(p.data()) + 1);
  EXPECT_NE(error_of(t, {}).find("params"), std::string::npos);
  EXPECT_NE(error_of(t, {}).find("not aligned"), std::string::npos);
  t = good;
  t.copy_type = AdamCopyType::kBF16;
  EXPECT_NE(error_of(t, {}).find("param_copy is null"), std::string::npos);
  t = good;
  t.param_copy = copy.data();
  EXPECT_NE(error_of(t, {}).find("copy_type is none"), std::string::npos);
  EXPECT_NE(error_of(good, {.step = 0}).find("step = 0"), std::string::npos);
  EXPECT_NE(error_of(good, {.beta2 = 1.0f}).find("beta2"), std::string::npos);
  EXPECT_NE(error_of(good, {.lr = -1.0f}).find("lr"), std::string::npos);
  EXPECT_NE(error_of(good, {.eps = NAN}).find("eps"), std::string::npos);
  EXPECT_NE(error_of(good, {}, {.num_threads = -2}).find("num_threads"), std::string::npos);
}

TEST(AdamArgsDeathTest, StepAbortsOnInvalidArguments) {
  std::vector<float> p(8), m(8), v(8), g(8);
  AdamTensors t{
      p.data(), m.data(), v.data(), g.data(), AdamGradType::kF32, nullptr, AdamCopyType::kBF16, 8};
  EXPECT_DEATH(AdamStep(t, {}, 1.0f), "param_copy is null");
}

}  // namespace
}  // namespace sluice::kernels
