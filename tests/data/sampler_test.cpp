// The seeded permutation and the window sampler: bijective, deterministic, seed-dependent,
// independent of how the draws are chunked, and resumable.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "engine/data/index_permutation.h"
#include "engine/data/window_sampler.h"

namespace sluice::data {
namespace {

std::vector<uint64_t> Order(uint64_t n, uint64_t key) {
  IndexPermutation perm(n, key);
  std::vector<uint64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = perm(i);
  return out;
}

TEST(IndexPermutation, IsABijectionForAwkwardSizes) {
  for (uint64_t n : {1u, 2u, 3u, 5u, 16u, 17u, 64u, 1000u, 4097u, 65537u}) {
    std::vector<uint64_t> order = Order(n, 42);
    std::sort(order.begin(), order.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(order[i], i) << "n=" << n;
  }
}

TEST(IndexPermutation, ShufflesAndDependsOnTheKey) {
  const uint64_t n = 1000;
  const std::vector<uint64_t> a = Order(n, 1);
  const std::vector<uint64_t> b = Order(n, 2);
  EXPECT_EQ(a, Order(n, 1));
  EXPECT_NE(a, b);
  // A random permutation has about one fixed point and moves elements about n/3 on average.
  int fixed = 0;
  double displacement = 0;
  for (uint64_t i = 0; i < n; ++i) {
    fixed += a[i] == i;
    displacement += std::abs(static_cast<double>(a[i]) - static_cast<double>(i));
  }
  EXPECT_LT(fixed, 10);
  EXPECT_GT(displacement / n, n / 5.0);
  EXPECT_LT(displacement / n, n / 2.0);
  // Neighbours in the order are not neighbours in the data.
  int adjacent = 0;
  for (uint64_t i = 0; i + 1 < n; ++i) adjacent += (a[i + 1] == a[i] + 1);
  EXPECT_LT(adjacent, 10);
}

TEST(WindowSampler, EachEpochVisitsEveryWindowOnceAtItsPhase) {
  const int64_t tokens = 10007, seq_len = 32;
  WindowSampler sampler(tokens, seq_len, 7);
  std::set<int64_t> phases;
  std::set<std::vector<int64_t>> orders;  // window numbers in visiting order, per epoch
  for (int epoch = 0; epoch < 6; ++epoch) {
    const int64_t windows = sampler.WindowsInEpoch(epoch);
    const int64_t phase = sampler.Phase(epoch);
    phases.insert(phase);
    ASSERT_GE(phase, 0);
    ASSERT_LT(phase, seq_len);
    EXPECT_EQ(windows, (tokens - 1 - phase) / seq_len);
    const std::vector<int64_t> starts = sampler.Take(windows);
    ASSERT_EQ(sampler.state().epoch, epoch);
    std::set<int64_t> distinct(starts.begin(), starts.end());
    ASSERT_EQ(static_cast<int64_t>(distinct.size()), windows);
    for (int64_t s : starts) {
      ASSERT_EQ((s - phase) % seq_len, 0);
      ASSERT_LE(s + seq_len + 1, tokens);
    }
    // Shuffled: not in file order.
    EXPECT_FALSE(std::is_sorted(starts.begin(), starts.end()));
    std::vector<int64_t> order;
    for (int64_t s : starts) order.push_back((s - phase) / seq_len);
    orders.insert(order);
  }
  EXPECT_GT(phases.size(), 1u);
  EXPECT_EQ(orders.size(), 6u);
}

TEST(WindowSampler, SameSeedSameOrderDifferentSeedDifferentOrder) {
  WindowSampler a(5000, 16, 1234), b(5000, 16, 1234), c(5000, 16, 1235);
  const std::vector<int64_t> first = a.Take(700);  // crosses into epoch 2
  EXPECT_EQ(first, b.Take(700));
  EXPECT_NE(first, c.Take(700));
  EXPECT_EQ(a.state(), b.state());
  EXPECT_GE(a.state().epoch, 2);
}

TEST(WindowSampler, ChunkingDoesNotChangeTheOrder) {
  WindowSampler whole(3001, 10, 9), pieces(3001, 10, 9);
  const std::vector<int64_t> all = whole.Take(1000);
  std::vector<int64_t> joined;
  for (int64_t chunk : {1, 7, 299, 3, 300, 390}) {
    const std::vector<int64_t> part = pieces.Take(chunk);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, all);
  EXPECT_EQ(whole.state(), pieces.state());
}

TEST(WindowSampler, RestoreContinuesExactly) {
  WindowSampler a(2000, 8, 3);
  a.Take(300);
  const SamplerState saved = a.state();
  const std::vector<int64_t> expected = a.Take(500);
  WindowSampler b(2000, 8, 99);  // the saved seed wins
  ASSERT_TRUE(b.Restore(saved).ok());
  EXPECT_EQ(b.Take(500), expected);
  EXPECT_FALSE(b.Restore(SamplerState{3, 0, 100000}).ok());
  EXPECT_FALSE(b.Restore(SamplerState{3, -1, 0}).ok());
}

// The order is part of what a stored loss curve depends on: it must not change by accident, nor
// differ between compilers or standard libraries (it uses integer arithmetic only).
TEST(WindowSampler, OrderIsPinned) {
  WindowSampler sampler(10007, 32, 1234);
  EXPECT_EQ(sampler.Phase(0), 1);
  EXPECT_EQ(sampler.Take(6), (std::vector<int64_t>{4673, 7713, 6273, 3073, 5697, 6081}));
}

TEST(WindowSampler, ARegionOfOneWindowAlwaysYieldsIt) {
  // 20 tokens at seq_len 16: one window, and only phases 0..3 keep it whole.
  WindowSampler sampler(20, 16, 5);
  for (int epoch = 0; epoch < 50; ++epoch) {
    ASSERT_EQ(sampler.WindowsInEpoch(epoch), 1);
    ASSERT_LE(sampler.Phase(epoch), 3);
  }
  const std::vector<int64_t> starts = sampler.Take(50);
  for (int64_t s : starts) ASSERT_LE(s + 17, 20);
}

}  // namespace
}  // namespace sluice::data
