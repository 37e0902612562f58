// Timeouts of the MPI backend: a collective that a rank joins late fails on the others with
// DeadlineExceeded naming the operation and the late rank; the communicator then refuses work
// until Drain() sees the late rank's matching call complete the stranded operation, after which
// it is healthy again. Run under mpirun -np 2 and -np 4.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tests/common/test_world.h"
#include "typed_buffer.h"

namespace sluice::testing {
namespace {

constexpr double kShortTimeout = 0.5;
constexpr int kSeenTag = 99;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

TEST(MpiTimeout, LateRankIsNamedThenMatchedByDrain) {
  Comm& world = TestWorld();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int late_world_rank = world.size() - 1;
  // Keys reversed: sub-communicator rank = size - 1 - world rank, so the late rank is sub rank 0
  // and the error must translate it back to its world rank.
  Result<std::unique_ptr<Comm>> split = world.Split(0, -world.rank());
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  Comm& sub = **split;
  sub.SetTimeout(kShortTimeout);
  const int w = sub.size();

  TypedBuffer warmup(DType::kF32, 4, 1.0f);
  ASSERT_TRUE(sub.AllReduce(warmup.data(), 4, DType::kF32, ReduceOp::kSum).ok());  // #1

  TypedBuffer data(DType::kF32, 1000, world.rank() + 1.0f);
  const float sum = w * (w + 1) / 2.0f;
  if (world.rank() != late_world_rank) {
    const auto start = std::chrono::steady_clock::now();
    const Status status = sub.AllReduce(data.data(), 1000, DType::kF32, ReduceOp::kSum);  // #2
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
    EXPECT_GE(waited, kShortTimeout);
    EXPECT_LT(waited, kShortTimeout + 2.0) << "the timeout did not bound the wait";
    EXPECT_TRUE(Contains(status.message(),
                         "all_reduce #2 (f32, 1000 elements, sum) on world/split(0) timed out "
                         "after 0.5 s: ranks 0 did not arrive (world ranks " +
                             std::to_string(late_world_rank) +
                             "); rank 0 last entered all_reduce #1"));
    EXPECT_TRUE(Contains(status.message(), "run.comm_timeout"));
    if (world.rank() == 0) std::printf("rank 0 got: %s\n", status.ToString().c_str());

    // The stranded all_reduce still owns `data`: new work is refused until it completes.
    const Status refused = sub.Barrier();
    EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
    EXPECT_TRUE(Contains(refused.message(), "unusable since all_reduce #2"));

    // Tell the late rank to come now, then wait for its call to complete ours.
    float seen = 1;
    ASSERT_TRUE(world.Send(&seen, 1, DType::kF32, late_world_rank, kSeenTag).ok());
    const Status drained = sub.Drain();
    ASSERT_TRUE(drained.ok()) << drained.ToString();
  } else {
    for (int r = 0; r < world.size() - 1; ++r) {
      float seen = 0;
      ASSERT_TRUE(world.Recv(&seen, 1, DType::kF32, r, kSeenTag).ok());
    }
    const Status late = sub.AllReduce(data.data(), 1000, DType::kF32, ReduceOp::kSum);  // #2
    ASSERT_TRUE(late.ok()) << late.ToString();
  }
  // The late call matched the stranded ones: everyone has the full sum.
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(data.Get(i), sum) << i;

  // Healthy again, in step on every rank.
  TypedBuffer after(DType::kBF16, 7, 2.0f);
  const Status again = sub.AllReduce(after.data(), 7, DType::kBF16, ReduceOp::kAvg);
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(after.Get(6), 2.0f);
}

TEST(MpiTimeout, AsyncHandleTimesOutThroughTest) {
  Comm& world = TestWorld();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  Result<std::unique_ptr<Comm>> split = world.Split(0, world.rank());
  ASSERT_TRUE(split.ok());
  Comm& sub = **split;
  sub.SetTimeout(kShortTimeout);
  const int late = world.size() - 1;
  TypedBuffer full(DType::kBF16, 1001, 1.0f);
  TypedBuffer shard(DType::kBF16, sub.Shard(1001).count);
  if (world.rank() != late) {
    CommHandle handle =
        sub.ReduceScatterAsync(full.data(), shard.data(), 1001, DType::kBF16, ReduceOp::kAvg);
    while (!handle.Test()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const Status status = handle.Wait();
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(Contains(status.message(),
                         "reduce_scatter #1 (bf16, 1001 elements, avg) on world/split(0)"));
    EXPECT_TRUE(Contains(status.message(), "ranks " + std::to_string(late) +
                                               " did not arrive; rank " + std::to_string(late) +
                                               " entered none yet"));
    float seen = 1;
    ASSERT_TRUE(world.Send(&seen, 1, DType::kF32, late, kSeenTag).ok());
    ASSERT_TRUE(sub.Drain().ok());
  } else {
    for (int r = 0; r < late; ++r) {
      float seen = 0;
      ASSERT_TRUE(world.Recv(&seen, 1, DType::kF32, r, kSeenTag).ok());
    }
    ASSERT_TRUE(
        sub.ReduceScatter(full.data(), shard.data(), 1001, DType::kBF16, ReduceOp::kAvg).ok());
  }
  for (size_t j = 0; j < shard.size(); ++j) ASSERT_EQ(shard.Get(j), 1.0f) << j;
}

TEST(MpiTimeout, UnmatchedRecvIsCancelledAndLeavesTheCommunicatorUsable) {
  Comm& world = TestWorld();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  Result<std::unique_ptr<Comm>> split = world.Split(0, world.rank());
  ASSERT_TRUE(split.ok());
  Comm& sub = **split;
  sub.SetTimeout(kShortTimeout);
  if (sub.rank() == 0) {
    TypedBuffer in(DType::kF32, 4);
    const Status status = sub.Recv(in.data(), 4, DType::kF32, 1, 5);
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(Contains(status.message(),
                         "recv of 4 f32 elements from rank 1 (tag 5) on world/split(0) timed out "
                         "after 0.5 s: rank 1 did not send it"));
  }
  sub.SetTimeout(kTestTimeoutSeconds);
  ASSERT_TRUE(sub.Barrier().ok());
}

}  // namespace
}  // namespace sluice::testing
