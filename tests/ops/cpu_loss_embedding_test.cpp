// The CPU cross-entropy and embedding kernels against the fp64 reference. Declared
// tolerances, in units of each output's largest magnitude: cross-entropy 1e-5 (fp32
// log-sum-exp over the vocabulary); embeddings 1e-6 (copies, and scatter-adds of a few rows).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_loss.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_loss.h"
#include "tests/ops/backend_compare.h"

namespace sluice::kernels {
namespace {

using testing::AsDouble;
using testing::Cast;
using testing::CompareBackends;
using testing::Outputs;
using testing::Rng;

constexpr double kLossTol = 1e-5;
constexpr double kEmbeddingTol = 1e-6;

struct LossCase {
  int64_t rows, vocab;
};

class CpuCrossEntropy : public ::testing::TestWithParam<LossCase> {};

TEST_P(CpuCrossEntropy, ForwardAndBackwardWithIgnoredRows) {
  const auto [rows, vocab] = GetParam();
  Rng rng(300 + rows);
  const auto logits = rng.Uniform(rows * vocab, -6, 6);
  std::vector<int32_t> targets = rng.Ints(rows, 0, static_cast<int32_t>(vocab - 1));
  for (int64_t r = 1; r < rows; r += 4) targets[r] = kIgnoreIndex;
  CompareBackends(
      [&](auto backend) {
        using T = typename decltype(backend)::T;
        std::vector<T> tlogits = Cast<T>(logits), lse(rows), dlogits(rows * vocab, T(4));
        T loss;
        if constexpr (decltype(backend)::kCpu) {
          loss = cpu::CrossEntropyForward(tlogits.data(), targets.data(), lse.data(), rows, vocab);
        } else {
          loss = ref::CrossEntropyForward(tlogits.data(), targets.data(), lse.data(), rows, vocab);
        }
        SLUICE_OPS_CALL(backend, CrossEntropyBackward, tlogits.data(), targets.data(), lse.data(),
                        T(0.75), dlogits.data(), rows, vocab);
        // In place, as the LM head uses it: the logits buffer becomes its gradient.
        SLUICE_OPS_CALL(backend, CrossEntropyBackward, tlogits.data(), targets.data(), lse.data(),
                        T(0.75), tlogits.data(), rows, vocab);
        return Outputs{{"loss", {static_cast<double>(loss)}},
                       {"lse", AsDouble(lse)},
                       {"dlogits", AsDouble(dlogits)},
                       {"dlogits in place", AsDouble(tlogits)}};
      },
      kLossTol, "cross_entropy");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuCrossEntropy,
                         ::testing::Values(LossCase{21, 37}, LossCase{64, 1031}, LossCase{2, 1}));

TEST(CpuCrossEntropy, AllRowsIgnoredGiveZeroLossAndGradient) {
  const std::vector<float> logits = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> targets = {kIgnoreIndex, kIgnoreIndex};
  std::vector<float> lse(2), dlogits(6, 1.0f);
  EXPECT_EQ(cpu::CrossEntropyForward(logits.data(), targets.data(), lse.data(), 2, 3), 0.0f);
  cpu::CrossEntropyBackward(logits.data(), targets.data(), lse.data(), 1.0f, dlogits.data(), 2, 3);
  EXPECT_EQ(dlogits, std::vector<float>(6, 0.0f));
}

TEST(CpuCrossEntropy, ThreadCountInvariant) {
  Rng rng(310);
  const int64_t rows = 100, vocab = 997;
  const auto logits = rng.Uniform(rows * vocab, -6, 6);
  const auto targets = rng.Ints(rows, -1, vocab - 1);
  auto run = [&](int threads) {
    std::vector<float> lse(rows), dlogits(rows * vocab);
    const float loss =
        cpu::CrossEntropyForward(logits.data(), targets.data(), lse.data(), rows, vocab, threads);
    cpu::CrossEntropyBackward(logits.data(), targets.data(), lse.data(), 1.0f, dlogits.data(), rows,
                              vocab, threads);
    return std::make_pair(loss, dlogits);
  };
  EXPECT_EQ(run(1), run(3));
}

struct EmbeddingCase {
  int64_t batch, seq, vocab, dim;
};

class CpuEmbedding : public ::testing::TestWithParam<EmbeddingCase> {};

TEST_P(CpuEmbedding, TokenAndPositionForwardAndBackward) {
  const auto [batch, seq, vocab, dim] = GetParam();
  const int64_t positions = seq + 3, tokens_count = batch * seq;
  Rng rng(320 + dim);
  std::vector<int32_t> tokens = rng.Ints(tokens_count, 0, static_cast<int32_t>(vocab - 1));
  tokens[0] = tokens[tokens_count - 1] = tokens[tokens_count / 2] = 2;  // repeated ids
  const auto table = rng.Uniform(vocab * dim), wpe = rng.Uniform(positions * dim);
  const auto dout = rng.Uniform(tokens_count * dim);
  const auto dtable0 = rng.Uniform(vocab * dim), dwpe0 = rng.Uniform(positions * dim);
  CompareBackends(
      [&](auto backend) {
        using T = typename decltype(backend)::T;
        std::vector<T> ttable = Cast<T>(table), twpe = Cast<T>(wpe), tdout = Cast<T>(dout);
        std::vector<T> x(tokens_count * dim), dtable = Cast<T>(dtable0), dwpe = Cast<T>(dwpe0);
        SLUICE_OPS_CALL(backend, EmbeddingForward, tokens.data(), ttable.data(), x.data(),
                        tokens_count, vocab, dim);
        SLUICE_OPS_CALL(backend, PositionEmbeddingForward, twpe.data(), x.data(), batch, seq,
                        positions, dim);
        SLUICE_OPS_CALL(backend, EmbeddingBackward, tokens.data(), tdout.data(), dtable.data(),
                        tokens_count, vocab, dim);
        SLUICE_OPS_CALL(backend, PositionEmbeddingBackward, tdout.data(), dwpe.data(), batch, seq,
                        positions, dim);
        return Outputs{{"x", AsDouble(x)}, {"dtable", AsDouble(dtable)}, {"dwpe", AsDouble(dwpe)}};
      },
      kEmbeddingTol, "embedding");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuEmbedding,
                         ::testing::Values(EmbeddingCase{3, 7, 37, 12},
                                           // dim over one column block, work over the threshold
                                           EmbeddingCase{4, 50, 37, 300}));

TEST(CpuEmbeddingDeathTest, AbortsOnTokenOutsideVocabulary) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<int32_t> tokens = {1, -2};
  std::vector<float> table(4 * 3), out(2 * 3);
  EXPECT_DEATH(cpu::EmbeddingBackward(tokens.data(), out.data(), table.data(), 2, 4, 3),
               "token id -2 at index 1");
}

}  // namespace
}  // namespace sluice::kernels
