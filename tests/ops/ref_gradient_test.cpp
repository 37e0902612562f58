// Every backward of the scalar reference against central finite differences of its forward, in
// fp64 (h = 1e-6, tolerance 1e-6 relative to the gradient's scale), for every differentiable
// input: activations, weights, biases, gains, tables. The objective is L = sum(w * y) for a
// random upstream gradient w, so the backward is called with dy = w.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_attention.h"
#include "kernels/ref/ops_elementwise.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_linear.h"
#include "kernels/ref/ops_loss.h"
#include "kernels/ref/ops_norm.h"
#include "kernels/ref/ops_rope.h"
#include "tests/ops/ops_test_util.h"

namespace sluice::kernels {
namespace {

using testing::Dot;
using testing::ExpectGradientMatches;
using testing::Rng;
using Vec = std::vector<double>;

TEST(RefGradient, AddAndBiasAdd) {
  Rng rng(1);
  const int64_t rows = 5, cols = 7;
  Vec a = rng.Uniform<double>(rows * cols), b = rng.Uniform<double>(rows * cols);
  Vec bias = rng.Uniform<double>(cols), w = rng.Uniform<double>(rows * cols);
  auto objective = [&] {
    Vec y(rows * cols);
    ref::Add(a.data(), b.data(), y.data(), rows * cols);
    ref::BiasAddForward(bias.data(), y.data(), rows, cols);
    return Dot(w, y);
  };
  // d(a + b + bias) hands w to a and to b; Accumulate is how a caller collects it.
  Vec da(rows * cols, 0.0), dbias(cols, 0.0);
  ref::Accumulate(w.data(), da.data(), rows * cols);
  ref::BiasAddBackward(w.data(), dbias.data(), rows, cols);
  ExpectGradientMatches(a, da, objective, "add da");
  ExpectGradientMatches(b, da, objective, "add db");
  ExpectGradientMatches(bias, dbias, objective, "bias_add dbias");
}

void CheckLinear(bool with_bias) {
  Rng rng(2);
  const int64_t rows = 7, in = 6, out = 5;
  Vec x = rng.Uniform<double>(rows * in), weight = rng.Uniform<double>(out * in);
  Vec bias = rng.Uniform<double>(out), w = rng.Uniform<double>(rows * out);
  const double* b = with_bias ? bias.data() : nullptr;
  auto objective = [&] {
    Vec y(rows * out);
    ref::LinearForward(x.data(), weight.data(), with_bias ? bias.data() : nullptr, y.data(), rows,
                       in, out);
    return Dot(w, y);
  };
  Vec dx(rows * in), dweight(out * in, 0.0), dbias(out, 0.0);
  ref::LinearBackward(x.data(), weight.data(), w.data(), dx.data(), dweight.data(),
                      with_bias ? dbias.data() : nullptr, rows, in, out);
  ExpectGradientMatches(x, dx, objective, "linear dx");
  ExpectGradientMatches(weight, dweight, objective, "linear dw");
  if (b != nullptr) ExpectGradientMatches(bias, dbias, objective, "linear db");
}

TEST(RefGradient, LinearWithBias) { CheckLinear(true); }
TEST(RefGradient, LinearWithoutBias) { CheckLinear(false); }

void CheckLayerNorm(bool with_beta) {
  Rng rng(3);
  const int64_t rows = 4, cols = 9;
  Vec x = rng.Uniform<double>(rows * cols, -2, 2), gamma = rng.Uniform<double>(cols, 0.5, 1.5);
  Vec beta = rng.Uniform<double>(cols), w = rng.Uniform<double>(rows * cols);
  const float eps = 1e-5f;
  auto objective = [&] {
    Vec y(rows * cols), mean(rows), rstd(rows);
    ref::LayerNormForward(x.data(), gamma.data(), with_beta ? beta.data() : nullptr, y.data(),
                          mean.data(), rstd.data(), rows, cols, eps);
    return Dot(w, y);
  };
  Vec y(rows * cols), mean(rows), rstd(rows);
  ref::LayerNormForward(x.data(), gamma.data(), with_beta ? beta.data() : nullptr, y.data(),
                        mean.data(), rstd.data(), rows, cols, eps);
  Vec dx(rows * cols), dgamma(cols, 0.0), dbeta(cols, 0.0);
  ref::LayerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), w.data(), dx.data(),
                         dgamma.data(), with_beta ? dbeta.data() : nullptr, rows, cols);
  ExpectGradientMatches(x, dx, objective, "layernorm dx");
  ExpectGradientMatches(gamma, dgamma, objective, "layernorm dgamma");
  if (with_beta) ExpectGradientMatches(beta, dbeta, objective, "layernorm dbeta");
}

TEST(RefGradient, LayerNorm) { CheckLayerNorm(true); }
TEST(RefGradient, LayerNormWithoutBias) { CheckLayerNorm(false); }

TEST(RefGradient, RmsNorm) {
  Rng rng(4);
  const int64_t rows = 4, cols = 9;
  Vec x = rng.Uniform<double>(rows * cols, -2, 2), gamma = rng.Uniform<double>(cols, 0.5, 1.5);
  Vec w = rng.Uniform<double>(rows * cols);
  const float eps = 1e-6f;
  auto objective = [&] {
    Vec y(rows * cols), rstd(rows);
    ref::RmsNormForward(x.data(), gamma.data(), y.data(), rstd.data(), rows, cols, eps);
    return Dot(w, y);
  };
  Vec y(rows * cols), rstd(rows);
  ref::RmsNormForward(x.data(), gamma.data(), y.data(), rstd.data(), rows, cols, eps);
  Vec dx(rows * cols), dgamma(cols, 0.0);
  ref::RmsNormBackward(x.data(), gamma.data(), rstd.data(), w.data(), dx.data(), dgamma.data(),
                       rows, cols);
  ExpectGradientMatches(x, dx, objective, "rmsnorm dx");
  ExpectGradientMatches(gamma, dgamma, objective, "rmsnorm dgamma");
}

TEST(RefGradient, Gelu) {
  Rng rng(5);
  const int64_t n = 61;
  Vec x = rng.Uniform<double>(n, -5, 5), w = rng.Uniform<double>(n);
  auto objective = [&] {
    Vec y(n);
    ref::GeluForward(x.data(), y.data(), n);
    return Dot(w, y);
  };
  Vec dx(n);
  ref::GeluBackward(x.data(), w.data(), dx.data(), n);
  ExpectGradientMatches(x, dx, objective, "gelu dx");
}

TEST(RefGradient, SwiGlu) {
  Rng rng(6);
  const int64_t n = 61;
  Vec gate = rng.Uniform<double>(n, -6, 6), up = rng.Uniform<double>(n, -2, 2);
  Vec w = rng.Uniform<double>(n);
  auto objective = [&] {
    Vec y(n);
    ref::SwiGluForward(gate.data(), up.data(), y.data(), n);
    return Dot(w, y);
  };
  Vec dgate(n), dup(n);
  ref::SwiGluBackward(gate.data(), up.data(), w.data(), dgate.data(), dup.data(), n);
  ExpectGradientMatches(gate, dgate, objective, "swiglu dgate");
  ExpectGradientMatches(up, dup, objective, "swiglu dup");
}

TEST(RefGradient, Rope) {
  Rng rng(7);
  const int64_t batch = 2, seq = 7, heads = 3, dim = 12;
  const int64_t n = batch * seq * heads * dim;
  Vec x = rng.Uniform<double>(n), w = rng.Uniform<double>(n);
  auto objective = [&] {
    Vec y(n);
    ref::RopeForward(x.data(), y.data(), batch, seq, heads, dim, 10000.0f);
    return Dot(w, y);
  };
  Vec dx(n);
  ref::RopeBackward(w.data(), dx.data(), batch, seq, heads, dim, 10000.0f);
  ExpectGradientMatches(x, dx, objective, "rope dx");
}

class RefAttentionGradient : public ::testing::TestWithParam<int64_t> {};

TEST_P(RefAttentionGradient, MatchesFiniteDifferences) {
  const AttentionDims dims{
      .batch = 2, .seq = 7, .q_heads = 4, .kv_heads = GetParam(), .head_dim = 12};
  Rng rng(8 + GetParam());
  const int64_t nq = dims.batch * dims.seq * dims.q_heads * dims.head_dim;
  const int64_t nkv = dims.batch * dims.seq * dims.kv_heads * dims.head_dim;
  Vec q = rng.Uniform<double>(nq, -2, 2), k = rng.Uniform<double>(nkv, -2, 2);
  Vec v = rng.Uniform<double>(nkv), w = rng.Uniform<double>(nq);
  Vec workspace(AttentionWorkspaceElements(dims));
  Vec lse(dims.batch * dims.q_heads * dims.seq);
  auto objective = [&] {
    Vec out(nq), scratch_lse(lse.size());
    ref::AttentionForward(q.data(), k.data(), v.data(), out.data(), scratch_lse.data(), dims,
                          workspace.data());
    return Dot(w, out);
  };
  Vec out(nq);
  ref::AttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), dims,
                        workspace.data());
  Vec dq(nq), dk(nkv, 7.0), dv(nkv, 7.0);  // dk, dv are overwritten: the 7s must not survive
  ref::AttentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(), w.data(), dq.data(),
                         dk.data(), dv.data(), dims, workspace.data());
  ExpectGradientMatches(q, dq, objective, "attention dq");
  ExpectGradientMatches(k, dk, objective, "attention dk");
  ExpectGradientMatches(v, dv, objective, "attention dv");
}

INSTANTIATE_TEST_SUITE_P(KvHeads, RefAttentionGradient, ::testing::Values(4, 2, 1),
                         [](const auto& info) { return "kv" + std::to_string(info.param); });

TEST(RefGradient, Embeddings) {
  Rng rng(9);
  const int64_t batch = 3, seq = 5, vocab = 11, positions = 8, dim = 6;
  std::vector<int32_t> tokens = rng.Ints(batch * seq, 0, vocab - 1);
  tokens[3] = tokens[9] = tokens[14] = 4;  // a repeated id must sum its rows
  Vec table = rng.Uniform<double>(vocab * dim), wpe = rng.Uniform<double>(positions * dim);
  Vec w = rng.Uniform<double>(batch * seq * dim);
  auto objective = [&] {
    Vec x(batch * seq * dim);
    ref::EmbeddingForward(tokens.data(), table.data(), x.data(), batch * seq, vocab, dim);
    ref::PositionEmbeddingForward(wpe.data(), x.data(), batch, seq, positions, dim);
    return Dot(w, x);
  };
  Vec dtable(vocab * dim, 0.0), dwpe(positions * dim, 0.0);
  ref::EmbeddingBackward(tokens.data(), w.data(), dtable.data(), batch * seq, vocab, dim);
  ref::PositionEmbeddingBackward(w.data(), dwpe.data(), batch, seq, positions, dim);
  ExpectGradientMatches(table, dtable, objective, "embedding dtable");
  // Rows of wpe past seq get no gradient; the check covers them being exactly zero too.
  ExpectGradientMatches(wpe, dwpe, objective, "position dwpe");
}

TEST(RefGradient, CrossEntropy) {
  Rng rng(10);
  const int64_t rows = 9, vocab = 37;
  Vec logits = rng.Uniform<double>(rows * vocab, -4, 4);
  std::vector<int32_t> targets = rng.Ints(rows, 0, vocab - 1);
  targets[2] = targets[7] = kIgnoreIndex;
  const double dloss = 1.7;
  auto objective = [&] {
    Vec lse(rows);
    return dloss * ref::CrossEntropyForward(logits.data(), targets.data(), lse.data(), rows, vocab);
  };
  Vec lse(rows), dlogits(rows * vocab, 3.0);
  ref::CrossEntropyForward(logits.data(), targets.data(), lse.data(), rows, vocab);
  ref::CrossEntropyBackward(logits.data(), targets.data(), lse.data(), dloss, dlogits.data(), rows,
                            vocab);
  ExpectGradientMatches(logits, dlogits, objective, "cross_entropy dlogits");
}

}  // namespace
}  // namespace sluice::kernels
