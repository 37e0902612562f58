// CPU LAMB: every variant against the scalar reference bit for bit (moments, norms' squared sums,
// parameters) over multi-step runs, for every gradient and copy dtype, odd sizes, several sum
// blocks and unaligned starts; sums independent of the thread count; DeepSpeed's update and trust
// ratio against a double-precision model; the ratio's clamping and its zero-norm rule; argument
// checks; dispatch.
#include "kernels/cpu/lamb.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/lamb_ref.h"
#include "tests/kernels/optimizer_test_util.h"

namespace sluice::kernels {
namespace {

using optimizer_test::AllIsas;
using optimizer_test::CaseName;
using optimizer_test::CaseParam;
using optimizer_test::ExpectCopyIsRneOfParams;
using optimizer_test::FirstBitMismatch;
using optimizer_test::IsaParamName;
using optimizer_test::IsaScope;
using optimizer_test::NextUniform;
using optimizer_test::ReferenceCases;

// p, m, v, the gradient and the copy of one optimizer, at chosen misalignments.
struct LambState : optimizer_test::OptimizerBuffers {
  LambState(size_t n, AdamGradType grad_type, AdamCopyType copy_type, bool aligned)
      : OptimizerBuffers(n, grad_type, copy_type, aligned, /*seed=*/4321 + n,
                         /*second_moment=*/true) {}

  LambTensors Tensors() {
    return LambTensors{.params = params.f32(),
                       .exp_avg = exp_avg.f32(),
                       .exp_avg_sq = exp_avg_sq.f32(),
                       .grads = grads.data(),
                       .grad_type = grad_type,
                       .param_copy = CopyOrNull(),
                       .copy_type = copy_type,
                       .count = count};
  }
};

uint64_t Bits(double x) { return std::bit_cast<uint64_t>(x); }

class LambVsReference : public ::testing::TestWithParam<CaseParam> {};

TEST_P(LambVsReference, MultiStepMatchesReferenceBitForBit) {
  auto [isa, grad_type, copy_type, n, aligned] = GetParam();
  SKIP_WITHOUT(isa);
  IsaScope scope(isa);
  ASSERT_EQ(LambIsa(), isa);

  for (bool eps_inside_sqrt : {false, true}) {
    SCOPED_TRACE(eps_inside_sqrt ? "eps inside sqrt" : "eps outside sqrt");
    LambState kernel(n, grad_type, copy_type, aligned);
    LambState reference(n, grad_type, copy_type, /*aligned=*/true);
    const AdamThreading threading{.num_threads = 3};
    const float grad_scale = 0.5f;
    for (int64_t step = 1; step <= 4; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const LambHyperparams hyper{.lr = 1e-2f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.99f,
                                  .eps = 1e-6f,
                                  .weight_decay = 0.01f,
                                  .eps_inside_sqrt = eps_inside_sqrt,
                                  .step = step};
      kernel.SetGrads(static_cast<uint32_t>(step));
      reference.SetGrads(static_cast<uint32_t>(step));
      const LambNormSums got = LambMoments(kernel.Tensors(), hyper, grad_scale, threading);
      const LambNormSums want = LambMomentsReference(reference.Tensors(), hyper, grad_scale);
      EXPECT_EQ(Bits(got.param_sq), Bits(want.param_sq)) << got.param_sq << " " << want.param_sq;
      EXPECT_EQ(Bits(got.update_sq), Bits(want.update_sq))
          << got.update_sq << " " << want.update_sq;
      const float trust = LambTrustRatio(want, hyper);
      LambApply(kernel.Tensors(), hyper, trust, threading);
      LambApplyReference(reference.Tensors(), hyper, trust);

      EXPECT_EQ(FirstBitMismatch(kernel.params.f32(), reference.params.f32(), n), -1) << "params";
      EXPECT_EQ(FirstBitMismatch(kernel.exp_avg.f32(), reference.exp_avg.f32(), n), -1) << "m";
      EXPECT_EQ(FirstBitMismatch(kernel.exp_avg_sq.f32(), reference.exp_avg_sq.f32(), n), -1)
          << "v";
      ExpectCopyIsRneOfParams(kernel);
      EXPECT_TRUE(kernel.GuardsIntact()) << "a write landed outside the tensors";
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllVariants, LambVsReference,
    // tails around 8 and 16 lanes, sum blocks of 16384 with a tail, many blocks and threads
    ReferenceCases(::testing::Values(size_t{1}, size_t{7}, size_t{17}, size_t{95}, size_t{40009},
                                     size_t{1000003})),
    CaseName);

class LambPerIsa : public ::testing::TestWithParam<Isa> {};

INSTANTIATE_TEST_SUITE_P(AllVariants, LambPerIsa, AllIsas(), IsaParamName);

TEST_P(LambPerIsa, SumsDoNotDependOnTheThreadCount) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  constexpr size_t n = 5 * kLambSumBlock + 123;
  std::vector<uint64_t> param_bits, update_bits;
  for (int threads : {1, 2, 3, 7}) {
    LambState state(n, AdamGradType::kF32, AdamCopyType::kNone, true);
    state.SetGrads(9);
    const LambNormSums sums =
        LambMoments(state.Tensors(), {.weight_decay = 0.1f}, 1.0f, {.num_threads = threads});
    param_bits.push_back(Bits(sums.param_sq));
    update_bits.push_back(Bits(sums.update_sq));
  }
  for (size_t i = 1; i < param_bits.size(); ++i) {
    EXPECT_EQ(param_bits[i], param_bits[0]);
    EXPECT_EQ(update_bits[i], update_bits[0]);
  }
}

// DeepSpeed's fused_lamb_cuda_kernel.cu in double: moments, u from the raw moments, the bias
// correction folded into the step size, weight decay inside u, trust = ||p|| / ||u|| clamped.
// Two steps over values whose ratio lands inside the clamp range.
TEST_P(LambPerIsa, FollowsDeepSpeedsUpdateRule) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  constexpr size_t n = 37;
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  std::vector<double> pd(n), md(n, 0.0), vd(n, 0.0);
  uint64_t rng = 17;
  for (size_t i = 0; i < n; ++i) pd[i] = p[i] = 2.0f * NextUniform(rng);
  const LambHyperparams base{
      .lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.1f};
  const float grad_scale = 0.25f;
  for (int64_t step = 1; step <= 2; ++step) {
    LambHyperparams hyper = base;
    hyper.step = step;
    for (size_t i = 0; i < n; ++i) g[i] = 4.0f * NextUniform(rng);
    double w2 = 0.0, u2 = 0.0;
    std::vector<double> ud(n);
    for (size_t i = 0; i < n; ++i) {
      const double gi = double{g[i]} * grad_scale;
      md[i] = double{hyper.beta1} * md[i] + (1.0 - hyper.beta1) * gi;
      vd[i] = double{hyper.beta2} * vd[i] + (1.0 - hyper.beta2) * gi * gi;
      ud[i] = md[i] / (std::sqrt(vd[i]) + hyper.eps) + double{hyper.weight_decay} * pd[i];
      w2 += pd[i] * pd[i];
      u2 += ud[i] * ud[i];
    }
    double trust = std::sqrt(w2) / std::sqrt(u2);
    ASSERT_GT(trust, hyper.min_coeff);
    ASSERT_LT(trust, hyper.max_coeff);
    const double step_size = hyper.lr * std::sqrt(1.0 - std::pow(double{hyper.beta2}, step)) /
                             (1.0 - std::pow(double{hyper.beta1}, step));
    for (size_t i = 0; i < n; ++i) pd[i] -= step_size * trust * ud[i];

    LambTensors t{.params = p.data(),
                  .exp_avg = m.data(),
                  .exp_avg_sq = v.data(),
                  .grads = g.data(),
                  .count = n};
    const LambNormSums sums = LambMoments(t, hyper, grad_scale);
    EXPECT_NEAR(sums.param_sq, w2, 1e-6 * w2);
    EXPECT_NEAR(sums.update_sq, u2, 1e-5 * u2);
    const float got_trust = LambTrustRatio(sums, hyper);
    EXPECT_NEAR(got_trust, trust, 1e-5 * trust);
    LambApply(t, hyper, got_trust);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(p[i], pd[i], 1e-5) << "element " << i << " step " << step;
      EXPECT_NEAR(m[i], md[i], 1e-6) << "element " << i;
      EXPECT_NEAR(v[i], vd[i], 1e-6) << "element " << i;
    }
  }
}

// A zero parameter (trust 1, as DeepSpeed's `reg_w != 0 && reg_u != 0`): p moves by exactly
// step_size * u; a zero update (zero gradient and moments, no decay) leaves p where it is.
TEST_P(LambPerIsa, ZeroNormsGiveTrustOne) {
  SKIP_WITHOUT(GetParam());
  IsaScope scope(GetParam());
  constexpr size_t n = 21;
  const LambHyperparams hyper{.lr = 0.5f, .beta1 = 0.5f, .beta2 = 0.75f, .eps = 1e-3f};
  {
    std::vector<float> p(n, 0.0f), m(n, 0.0f), v(n, 0.0f), g(n, 1.0f);
    LambTensors t{.params = p.data(),
                  .exp_avg = m.data(),
                  .exp_avg_sq = v.data(),
                  .grads = g.data(),
                  .count = n};
    const LambNormSums sums = LambMoments(t, hyper, 1.0f);
    EXPECT_EQ(sums.param_sq, 0.0);
    EXPECT_GT(sums.update_sq, 0.0);
    ASSERT_EQ(LambTrustRatio(sums, hyper), 1.0f);
    LambApply(t, hyper, 1.0f);
    const LambStepConstants c = MakeLambStepConstants(hyper, 1.0f);
    const float u = 0.5f / (std::sqrt(0.25f) + 1e-3f);  // m = 0.5, v = 0.25
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(p[i], 0.0f - c.step_size * u) << i;
  }
  {
    std::vector<float> p(n, 3.0f), m(n, 0.0f), v(n, 0.0f), g(n, 0.0f);
    LambTensors t{.params = p.data(),
                  .exp_avg = m.data(),
                  .exp_avg_sq = v.data(),
                  .grads = g.data(),
                  .count = n};
    const LambNormSums sums = LambMoments(t, hyper, 1.0f);
    EXPECT_EQ(sums.param_sq, 9.0 * n);
    EXPECT_EQ(sums.update_sq, 0.0);
    ASSERT_EQ(LambTrustRatio(sums, hyper), 1.0f);
    LambApply(t, hyper, 1.0f);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(p[i], 3.0f) << i;
  }
}

TEST(LambTrustRatio, ClampsToTheCoefficients) {
  const LambHyperparams hyper;  // min 0.01, max 10
  EXPECT_EQ(LambTrustRatio({.param_sq = 400.0, .update_sq = 1.0}, hyper), 10.0f);
  EXPECT_EQ(LambTrustRatio({.param_sq = 1e-8, .update_sq = 1.0}, hyper), 0.01f);
  EXPECT_EQ(LambTrustRatio({.param_sq = 4.0, .update_sq = 1.0}, hyper), 2.0f);
  EXPECT_EQ(LambTrustRatio({.param_sq = 1.0, .update_sq = 16.0}, hyper), 0.25f);
  const LambHyperparams narrow{.max_coeff = 1.5f, .min_coeff = 0.5f};
  EXPECT_EQ(LambTrustRatio({.param_sq = 4.0, .update_sq = 1.0}, narrow), 1.5f);
  EXPECT_EQ(LambTrustRatio({.param_sq = 1.0, .update_sq = 16.0}, narrow), 0.5f);
  // Either norm 0: 1, even outside [min, max].
  EXPECT_EQ(LambTrustRatio({.param_sq = 0.0, .update_sq = 5.0}, narrow), 1.0f);
  EXPECT_EQ(LambTrustRatio({.param_sq = 5.0, .update_sq = 0.0}, hyper), 1.0f);
  EXPECT_EQ(LambTrustRatio({.param_sq = 0.0, .update_sq = 0.0}, hyper), 1.0f);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(LambTrustRatio({.param_sq = 1.0, .update_sq = nan}, hyper)));
}

TEST(LambStepConstants, BiasCorrectionFoldsIntoTheStepSize) {
  const LambHyperparams hyper{.lr = 0.1f, .beta1 = 0.5f, .beta2 = 0.75f, .step = 2};
  // sqrt(1 - 0.5625) / (1 - 0.25) = 0.661437... / 0.75
  EXPECT_FLOAT_EQ(MakeLambStepConstants(hyper, 1.0f).step_size,
                  static_cast<float>(0.1 * std::sqrt(0.4375) / 0.75));
  LambHyperparams plain = hyper;
  plain.bias_correction = false;
  EXPECT_EQ(MakeLambStepConstants(plain, 1.0f).step_size, 0.1f);
}

TEST(LambDispatch, ForceIsaLowersTheVariant) {
  optimizer_test::ExpectForceIsaLowersTheVariant(&LambIsa);
}

TEST(LambArgs, ErrorsNameTheField) {
  std::vector<float> p(8), m(8), v(8), g(8);
  const LambTensors good{.params = p.data(),
                         .exp_avg = m.data(),
                         .exp_avg_sq = v.data(),
                         .grads = g.data(),
                         .count = 8};
  auto error_of = [&](LambTensors t, LambHyperparams h, bool need_grads = true) {
    return LambArgsError(t, h, {}, need_grads);
  };
  EXPECT_EQ(error_of(good, {}), "");
  EXPECT_EQ(error_of(LambTensors{}, {}), "") << "count 0 needs no buffers";
  LambTensors t = good;
  t.exp_avg_sq = nullptr;
  EXPECT_NE(error_of(t, {}).find("exp_avg_sq is null"), std::string::npos) << error_of(t, {});
  t = good;
  t.grads = nullptr;
  EXPECT_NE(error_of(t, {}).find("grads is null"), std::string::npos);
  EXPECT_EQ(error_of(t, {}, /*need_grads=*/false), "") << "LambApply reads no gradient";
  EXPECT_NE(error_of(good, {.eps = 0.0f}).find("eps"), std::string::npos);
  EXPECT_NE(error_of(good, {.max_coeff = 0.5f, .min_coeff = 1.0f}).find("max_coeff"),
            std::string::npos);
  EXPECT_NE(error_of(good, {.min_coeff = -1.0f}).find("min_coeff"), std::string::npos);
  EXPECT_NE(error_of(good, {.step = 0}).find("step"), std::string::npos);
  EXPECT_NE(error_of(good, {.beta2 = 1.0f}).find("beta2"), std::string::npos);
}

TEST(LambArgsDeathTest, AbortsOnInvalidArguments) {
  std::vector<float> p(8), m(8), v(8), g(8);
  LambTensors t{.params = p.data(),
                .exp_avg = m.data(),
                .exp_avg_sq = v.data(),
                .grads = g.data(),
                .copy_type = AdamCopyType::kBF16,
                .count = 8};
  EXPECT_DEATH(LambApply(t, {}, 1.0f), "param_copy is null");
  t.copy_type = AdamCopyType::kNone;
  EXPECT_DEATH(LambMoments(t, {.step = 0}, 1.0f), "step");
}

}  // namespace
}  // namespace sluice::kernels
