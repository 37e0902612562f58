// The reference's forward semantics against values worked out by hand or with PyTorch's
// definitions, and the properties the model relies on: causality, grouped-query attention as
// Hugging Face's repeat_kv, RoPE's rotate_half pairing, cross-entropy's ignore index, the
// argument validators and the aborts on invalid ids.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_attention.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_loss.h"
#include "kernels/ref/ops_norm.h"
#include "kernels/ref/ops_rope.h"
#include "tests/ops/ops_test_util.h"

namespace sluice::kernels {
namespace {

using testing::ExpectClose;
using testing::Rng;
using Vec = std::vector<double>;

TEST(RefSemantics, GeluIsTheTanhApproximation) {
  // torch.nn.functional.gelu(x, approximate="tanh"), evaluated in fp64.
  const Vec x = {-3, -1, -0.5, 0, 0.5, 1, 3};
  const Vec want = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                    0.34571400982514394,    0.8411919906082768,   2.996362607918227};
  Vec y(x.size());
  ref::GeluForward(x.data(), y.data(), x.size());
  ExpectClose(y, want, 1e-15, "gelu");
}

TEST(RefSemantics, SwiGluIsSiluOfGateTimesUp) {
  const Vec gate = {-2, 0, 1.5}, up = {3, 5, -2};
  // silu(-2) = -0.2384058440442351, silu(0) = 0, silu(1.5) = 1.2263617142904655
  const Vec want = {-0.2384058440442351 * 3, 0.0, 1.2263617142904655 * -2};
  Vec y(3);
  ref::SwiGluForward(gate.data(), up.data(), y.data(), 3);
  ExpectClose(y, want, 1e-15, "swiglu");
}

TEST(RefSemantics, LayerNormUsesBiasedVariance) {
  const Vec x = {1, 2, 3, 4}, gamma = {1, 2, 1, 1}, beta = {0, 0, 0, 10};
  Vec y(4), mean(1), rstd(1);
  ref::LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), 1,
                        4, 0.0f);
  // mean 2.5, biased variance 1.25.
  const double s = 1.0 / std::sqrt(1.25);
  ExpectClose(mean, Vec{2.5}, 1e-15, "mean");
  ExpectClose(rstd, Vec{s}, 1e-15, "rstd");
  ExpectClose(y, Vec{-1.5 * s, -0.5 * s * 2, 0.5 * s, 1.5 * s + 10}, 1e-15, "layernorm");
}

TEST(RefSemantics, RmsNormDividesByRootMeanSquare) {
  const Vec x = {3, -4}, gamma = {1, 0.5};
  Vec y(2), rstd(1);
  ref::RmsNormForward(x.data(), gamma.data(), y.data(), rstd.data(), 1, 2, 0.0f);
  const double rms = std::sqrt(12.5);
  ExpectClose(y, Vec{3 / rms, -4 / rms * 0.5}, 1e-15, "rmsnorm");
}

TEST(RefSemantics, RopePairsDimensionIWithIPlusHalf) {
  // head_dim 4, theta 100: inv_freq = {1, 100^-0.5 = 0.1}. Position 0 is the identity.
  const Vec x = {1, 2, 3, 4, /* t=1 */ 1, 2, 3, 4};
  Vec y(8);
  ref::RopeForward(x.data(), y.data(), 1, 2, 1, 4, 100.0f);
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.1), s1 = std::sin(0.1);
  const Vec want = {1, 2, 3, 4, 1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0, 4 * c1 + 2 * s1};
  ExpectClose(y, want, 1e-7, "rope");  // theta passes through float: 100 is exact
}

TEST(RefSemantics, RopeBackwardInvertsForwardInPlace) {
  Rng rng(20);
  Vec x = rng.Uniform<double>(2 * 5 * 3 * 8);
  Vec y = x;
  ref::RopeForward(y.data(), y.data(), 2, 5, 3, 8, 10000.0f);
  ref::RopeBackward(y.data(), y.data(), 2, 5, 3, 8, 10000.0f);
  ExpectClose(y, x, 1e-14, "rope round trip");
}

TEST(RefSemantics, AttentionFirstTokenAttendsOnlyToItself) {
  Rng rng(21);
  const AttentionDims dims{.batch = 1, .seq = 3, .q_heads = 2, .kv_heads = 2, .head_dim = 4};
  Vec q = rng.Uniform<double>(24), k = rng.Uniform<double>(24), v = rng.Uniform<double>(24);
  Vec out(24), lse(6), workspace(AttentionWorkspaceElements(dims));
  ref::AttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), dims,
                        workspace.data());
  ExpectClose(Vec(out.begin(), out.begin() + 8), Vec(v.begin(), v.begin() + 8), 1e-15, "t=0");
  // lse of the first row is its single scaled score.
  double dot = 0;
  for (int d = 0; d < 4; ++d) dot += q[d] * k[d];
  EXPECT_NEAR(lse[0], dot / 2.0, 1e-15);
}

TEST(RefSemantics, AttentionIsCausal) {
  Rng rng(22);
  const AttentionDims dims{.batch = 2, .seq = 6, .q_heads = 2, .kv_heads = 1, .head_dim = 4};
  const int64_t nq = 2 * 6 * 2 * 4, nkv = 2 * 6 * 1 * 4;
  Vec q = rng.Uniform<double>(nq), k = rng.Uniform<double>(nkv), v = rng.Uniform<double>(nkv);
  Vec out(nq), lse(24), workspace(AttentionWorkspaceElements(dims));
  ref::AttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), dims,
                        workspace.data());
  // Change key and value of token 4 of batch 1: outputs before it must not move, at it must.
  Vec k2 = k, v2 = v, out2(nq);
  for (int d = 0; d < 4; ++d) {
    k2[(6 + 4) * 4 + d] += 1.0;
    v2[(6 + 4) * 4 + d] += 1.0;
  }
  ref::AttentionForward(q.data(), k2.data(), v2.data(), out2.data(), lse.data(), dims,
                        workspace.data());
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t token = i / 8;  // [batch * seq] index of element i
    if (token < 6 + 4) {
      EXPECT_EQ(out[i], out2[i]) << "element " << i << " saw a later token";
    } else {
      EXPECT_NE(out[i], out2[i]) << "element " << i << " did not see token 4";
    }
  }
}

TEST(RefSemantics, GroupedQueryEqualsMultiHeadWithRepeatedKv) {
  Rng rng(23);
  const AttentionDims gqa{.batch = 2, .seq = 5, .q_heads = 6, .kv_heads = 2, .head_dim = 4};
  AttentionDims mha = gqa;
  mha.kv_heads = 6;
  const int64_t tokens = 10;
  Vec q = rng.Uniform<double>(tokens * 6 * 4), k = rng.Uniform<double>(tokens * 2 * 4);
  Vec v = rng.Uniform<double>(tokens * 2 * 4);
  // repeat_kv: kv head g serves query heads g * 3 .. g * 3 + 2.
  Vec k_rep(tokens * 6 * 4), v_rep(tokens * 6 * 4);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < 6; ++h) {
      for (int64_t d = 0; d < 4; ++d) {
        k_rep[(t * 6 + h) * 4 + d] = k[(t * 2 + h / 3) * 4 + d];
        v_rep[(t * 6 + h) * 4 + d] = v[(t * 2 + h / 3) * 4 + d];
      }
    }
  }
  Vec out_gqa(q.size()), out_mha(q.size()), lse_gqa(60), lse_mha(60);
  Vec workspace(AttentionWorkspaceElements(gqa));
  ref::AttentionForward(q.data(), k.data(), v.data(), out_gqa.data(), lse_gqa.data(), gqa,
                        workspace.data());
  ref::AttentionForward(q.data(), k_rep.data(), v_rep.data(), out_mha.data(), lse_mha.data(), mha,
                        workspace.data());
  ExpectClose(out_gqa, out_mha, 0.0, "gqa out");
  ExpectClose(lse_gqa, lse_mha, 0.0, "gqa lse");
}

TEST(RefSemantics, CrossEntropyValuesAndIgnoreIndex) {
  const Vec logits = {0, 0, /* row 1 */ 1, 2, /* row 2, ignored */ 5, -5};
  const std::vector<int32_t> targets = {0, 0, kIgnoreIndex};
  Vec lse(3);
  const double loss = ref::CrossEntropyForward(logits.data(), targets.data(), lse.data(), 3, 2);
  const double row1 = std::log(std::exp(1.0) + std::exp(2.0)) - 1.0;
  EXPECT_NEAR(loss, (std::log(2.0) + row1) / 2, 1e-15);
  const std::vector<int32_t> none = {kIgnoreIndex, kIgnoreIndex, kIgnoreIndex};
  EXPECT_EQ(ref::CrossEntropyForward(logits.data(), none.data(), lse.data(), 3, 2), 0.0);
  Vec dlogits(6, 1.0);
  ref::CrossEntropyBackward(logits.data(), none.data(), lse.data(), 1.0, dlogits.data(), 3, 2);
  EXPECT_EQ(dlogits, Vec(6, 0.0));
}

TEST(RefSemantics, CrossEntropyIsStableForHugeLogits) {
  const Vec logits = {1000, 0, -1000};
  const std::vector<int32_t> targets = {1};
  Vec lse(1);
  EXPECT_NEAR(ref::CrossEntropyForward(logits.data(), targets.data(), lse.data(), 1, 3), 1000.0,
              1e-12);
  EXPECT_EQ(lse[0], 1000.0);
}

TEST(Validators, FindTheFirstBadValue) {
  const std::vector<int32_t> tokens = {0, 4, 5, -1};
  EXPECT_EQ(FirstInvalidToken(tokens.data(), 2, 5), -1);
  EXPECT_EQ(FirstInvalidToken(tokens.data(), 4, 5), 2);
  EXPECT_EQ(FirstInvalidTarget(tokens.data(), 4, 6), -1);  // -1 is the ignore index
  EXPECT_EQ(FirstInvalidTarget(tokens.data(), 4, 5), 2);
  EXPECT_EQ(CountValidTargets(tokens.data(), 4), 3);
  EXPECT_EQ(AttentionDimsError({.batch = 1, .seq = 4, .q_heads = 8, .kv_heads = 2, .head_dim = 16}),
            "");
  EXPECT_EQ(AttentionDimsError({.batch = 1, .seq = 4, .q_heads = 6, .kv_heads = 4, .head_dim = 16}),
            "q_heads = 6 is not a multiple of kv_heads = 4");
  EXPECT_NE(AttentionDimsError({.batch = 1, .seq = 4, .q_heads = 6, .kv_heads = 0, .head_dim = 16}),
            "");
}

TEST(ValidatorsDeathTest, KernelsAbortOnInvalidIds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<int32_t> tokens = {0, 7};
  Vec table(5 * 2), out(2 * 2);
  EXPECT_DEATH(ref::EmbeddingForward(tokens.data(), table.data(), out.data(), 2, 5, 2),
               "EmbeddingForward: invalid arguments: token id 7 at index 1 is outside \\[0, 5\\)");
  Vec logits(2 * 5), lse(2);
  EXPECT_DEATH(ref::CrossEntropyForward(logits.data(), tokens.data(), lse.data(), 2, 5),
               "target 7 at row 1");
  const AttentionDims bad{.batch = 1, .seq = 2, .q_heads = 3, .kv_heads = 2, .head_dim = 2};
  Vec q(12), k(8), workspace(AttentionWorkspaceElements(bad)), lse2(6);
  EXPECT_DEATH(ref::AttentionForward(q.data(), k.data(), k.data(), q.data(), lse2.data(), bad,
                                     workspace.data()),
               "not a multiple");
  EXPECT_DEATH(ref::RopeForward(q.data(), q.data(), 1, 2, 2, 3, 10000.0f), "head_dim = 3 is odd");
}

}  // namespace
}  // namespace sluice::kernels
