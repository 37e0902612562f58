// The ZeRO formulas against the paper's published figures and hand-computed values.
#include "engine/estimate/zero_formulas.h"

#include <gtest/gtest.h>

namespace sluice::estimate {
namespace {

// ZeRO paper, section 5 / figure 1: Ψ = 7.5B, N_d = 64, K = 12, mixed precision (fp16
// parameters and gradients): 120 GB without ZeRO, then 31.4 GB, 16.6 GB and 1.9 GB per GPU.
TEST(ZeroFormulasTest, ReproducesThePapersSevenPointFiveBillionExample) {
  const int64_t psi = 7'500'000'000;
  const BytesPerElement mixed{.params = 2, .grads = 2, .optimizer = 12};
  const double gb = 1e9;
  EXPECT_DOUBLE_EQ(ZeroModelStateBytes(psi, 64, 0, mixed).total() / gb, 120.0);
  EXPECT_NEAR(ZeroModelStateBytes(psi, 64, 1, mixed).total() / gb, 31.4, 0.05);
  EXPECT_NEAR(ZeroModelStateBytes(psi, 64, 2, mixed).total() / gb, 16.6, 0.05);
  EXPECT_NEAR(ZeroModelStateBytes(psi, 64, 3, mixed).total() / gb, 1.9, 0.05);
  // Exactly: 4Ψ + 12Ψ/64, 2Ψ + 14Ψ/64, 16Ψ/64 (64 divides 7.5e9).
  EXPECT_EQ(ZeroModelStateBytes(psi, 64, 1, mixed).total(), 30'000'000'000 + 1'406'250'000);
  EXPECT_EQ(ZeroModelStateBytes(psi, 64, 2, mixed).total(), 15'000'000'000 + 1'640'625'000);
  EXPECT_EQ(ZeroModelStateBytes(psi, 64, 3, mixed).total(), 1'875'000'000);
}

// Stages 0-3 x N = 1..4 for Ψ = 1000 (divisible by 1, 2, 4; N = 3 pads to 334).
TEST(ZeroFormulasTest, EachStageShardsItsStateOverTheRanks) {
  const BytesPerElement b{.params = 2, .grads = 4, .optimizer = 12};
  struct Case {
    int world;
    int64_t shard;
  };
  for (const Case& c : {Case{1, 1000}, Case{2, 500}, Case{3, 334}, Case{4, 250}}) {
    SCOPED_TRACE(c.world);
    const ModelStateBytes s0 = ZeroModelStateBytes(1000, c.world, 0, b);
    EXPECT_EQ(s0.params, 2000);
    EXPECT_EQ(s0.grads, 4000);
    EXPECT_EQ(s0.optimizer, 12000);
    const ModelStateBytes s1 = ZeroModelStateBytes(1000, c.world, 1, b);
    EXPECT_EQ(s1.params, 2000);
    EXPECT_EQ(s1.grads, 4000);
    EXPECT_EQ(s1.optimizer, 12 * c.shard);
    const ModelStateBytes s2 = ZeroModelStateBytes(1000, c.world, 2, b);
    EXPECT_EQ(s2.params, 2000);
    EXPECT_EQ(s2.grads, 4 * c.shard);
    EXPECT_EQ(s2.optimizer, 12 * c.shard);
    const ModelStateBytes s3 = ZeroModelStateBytes(1000, c.world, 3, b);
    EXPECT_EQ(s3.params, 2 * c.shard);
    EXPECT_EQ(s3.grads, 4 * c.shard);
    EXPECT_EQ(s3.optimizer, 12 * c.shard);
    EXPECT_EQ(s3.total(), 18 * c.shard);
  }
}

TEST(ZeroFormulasTest, ShardsAreCeilingDivisionsAndTheLastRankHoldsTheRest) {
  EXPECT_EQ(MaxShardElements(10, 4), 3);  // 3 + 3 + 3 + 1
  EXPECT_EQ(LastShardElements(10, 4), 1);
  EXPECT_EQ(MaxShardElements(10, 3), 4);  // 4 + 4 + 2
  EXPECT_EQ(LastShardElements(10, 3), 2);
  EXPECT_EQ(MaxShardElements(5, 4), 2);  // 2 + 2 + 1 + 0
  EXPECT_EQ(LastShardElements(5, 4), 0);
  EXPECT_EQ(MaxShardElements(12, 4), 3);
  EXPECT_EQ(LastShardElements(12, 4), 3);
  EXPECT_EQ(MaxShardElements(7, 1), 7);
}

}  // namespace
}  // namespace sluice::estimate
