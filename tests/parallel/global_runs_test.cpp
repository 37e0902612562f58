// GlobalRunsOf against GlobalIndex element by element: every local element lands where the
// sharding says, the runs are maximal and in local order.
#include "engine/parallel/global_runs.h"

#include <gtest/gtest.h>

#include <vector>

namespace sluice::parallel {
namespace {

// What GlobalRunsOf must return, built one element at a time.
std::vector<GlobalRun> RunsByElement(const TensorSharding& s, int64_t begin, int64_t end) {
  std::vector<GlobalRun> runs;
  for (int64_t e = begin; e < end; ++e) {
    const int64_t g = s.GlobalIndex(e);
    if (!runs.empty() && runs.back().global_begin + runs.back().count == g) {
      ++runs.back().count;
    } else {
      runs.push_back({.local_begin = e, .global_begin = g, .count = 1});
    }
  }
  return runs;
}

void ExpectEveryRange(const TensorSharding& s) {
  const int64_t n = s.LocalShape().numel();
  for (int64_t begin = 0; begin <= n; begin += 3) {
    for (int64_t end = begin; end <= n; end += 5) {
      EXPECT_EQ(GlobalRunsOf(s, begin, end), RunsByElement(s, begin, end))
          << s.ToString() << " [" << begin << ", " << end << ")";
    }
  }
}

TEST(GlobalRunsTest, WholeAndReplicatedAreOneRun) {
  const Shape shape({6, 4});
  EXPECT_EQ(GlobalRunsOf(WholeTensor(shape), 2, 20),
            (std::vector<GlobalRun>{{.local_begin = 2, .global_begin = 2, .count = 18}}));
  EXPECT_EQ(GlobalRunsOf(ReplicatedTensor(shape, 2), 0, 24).size(), 1u);
  EXPECT_TRUE(GlobalRunsOf(WholeTensor(shape), 5, 5).empty());
}

TEST(GlobalRunsTest, ColumnParallelIsOneRunPerBlock) {
  // [12, 4] split along dim 0 in three blocks of 4 (q, k, v), 2 ways: rank 1 holds rows 2-3,
  // 6-7 and 10-11.
  Result<TensorSharding> s = SplitTensor(Shape({12, 4}), 0, 2, 1, {4, 4, 4});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GlobalRunsOf(*s, 0, 24),
            (std::vector<GlobalRun>{{.local_begin = 0, .global_begin = 8, .count = 8},
                                    {.local_begin = 8, .global_begin = 24, .count = 8},
                                    {.local_begin = 16, .global_begin = 40, .count = 8}}));
  ExpectEveryRange(*s);
}

TEST(GlobalRunsTest, RowParallelIsOneRunPerRow) {
  Result<TensorSharding> s = SplitTensor(Shape({3, 8}), 1, 4, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GlobalRunsOf(*s, 1, 6),
            (std::vector<GlobalRun>{{.local_begin = 1, .global_begin = 5, .count = 1},
                                    {.local_begin = 2, .global_begin = 12, .count = 2},
                                    {.local_begin = 4, .global_begin = 20, .count = 2}}));
  ExpectEveryRange(*s);
}

TEST(GlobalRunsTest, MatchesGlobalIndexForEveryLayout) {
  for (int64_t rank = 0; rank < 3; ++rank) {
    // A vocabulary of 11 rows over 3 ranks: pieces of 4, 4 and 3.
    Result<TensorSharding> vocab = SplitTensorBalanced(Shape({11, 5}), 0, 3, rank);
    ASSERT_TRUE(vocab.ok());
    ExpectEveryRange(*vocab);
    Result<TensorSharding> bias = SplitTensor(Shape({9}), 0, 3, rank, {3, 3, 3});
    ASSERT_TRUE(bias.ok());
    ExpectEveryRange(*bias);
    Result<TensorSharding> inner = SplitTensor(Shape({2, 6, 3}), 1, 3, rank);
    ASSERT_TRUE(inner.ok());
    ExpectEveryRange(*inner);
  }
}

}  // namespace
}  // namespace sluice::parallel
