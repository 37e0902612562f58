#include <gtest/gtest.h>

#include "runtime/comm.h"

namespace sluice {
namespace {

TEST(ShardRange, SplitsLikeZero3WithShortLastShards) {
  // ceil(7 / 4) = 2 per rank: 2, 2, 2, 1.
  EXPECT_EQ(ShardRange(7, 4, 0), (ShardSpan{0, 2}));
  EXPECT_EQ(ShardRange(7, 4, 2), (ShardSpan{4, 2}));
  EXPECT_EQ(ShardRange(7, 4, 3), (ShardSpan{6, 1}));
  // ceil(5 / 4) = 2: 2, 2, 1, 0 — the last rank holds nothing.
  EXPECT_EQ(ShardRange(5, 4, 2), (ShardSpan{4, 1}));
  EXPECT_EQ(ShardRange(5, 4, 3), (ShardSpan{5, 0}));
  EXPECT_EQ(ShardRange(1, 4, 0), (ShardSpan{0, 1}));
  EXPECT_EQ(ShardRange(1, 4, 1), (ShardSpan{1, 0}));
  EXPECT_EQ(ShardRange(0, 4, 3), (ShardSpan{0, 0}));
  EXPECT_EQ(ShardRange(1000, 4, 3), (ShardSpan{750, 250}));
}

TEST(ShardRange, ShardsTileTheBufferInRankOrder) {
  for (size_t n : {0, 1, 2, 7, 1000, 1001, 4099}) {
    for (int world : {1, 2, 3, 4, 7, 64}) {
      size_t next = 0;
      for (int rank = 0; rank < world; ++rank) {
        const ShardSpan span = ShardRange(n, world, rank);
        EXPECT_EQ(span.offset, next) << n << " " << world << " " << rank;
        EXPECT_LE(span.count, (n + world - 1) / world);
        next += span.count;
      }
      EXPECT_EQ(next, n) << n << " " << world;
    }
  }
}

TEST(FormatRankList, CompressesRuns) {
  EXPECT_EQ(FormatRankList({3}), "3");
  EXPECT_EQ(FormatRankList({7, 0, 1, 2, 5, 9, 8}), "0-2, 5, 7-9");
  EXPECT_EQ(FormatRankList({}), "");
}

TEST(DescribeCommOp, NamesOperationDtypeAndCount) {
  internal::CommOpInfo info;
  info.kind = CommOpKind::kAllReduce;
  info.seq = 17;
  info.dtype = DType::kF32;
  info.count = 1000;
  info.reduce_op = ReduceOp::kSum;
  EXPECT_EQ(internal::DescribeCommOp(info, "world"),
            "all_reduce #17 (f32, 1000 elements, sum) on world");
  info.kind = CommOpKind::kRecv;
  info.peer = 2;
  info.tag = 5;
  info.dtype = DType::kBF16;
  EXPECT_EQ(internal::DescribeCommOp(info, "world"),
            "recv of 1000 bf16 elements from rank 2 (tag 5) on world");
}

TEST(CommHandle, DefaultAndFinishedHandles) {
  CommHandle done;
  EXPECT_TRUE(done.finished());
  EXPECT_TRUE(done.Test());
  EXPECT_TRUE(done.Wait().ok());
  CommHandle failed = CommHandle::Finished(InvalidArgumentError("bad root"));
  EXPECT_TRUE(failed.Test());
  EXPECT_EQ(failed.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.Wait().message(), "bad root");  // repeated Wait gives the same status
  CommHandle moved = std::move(failed);
  EXPECT_EQ(moved.Wait().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
