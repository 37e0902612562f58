// Every collective of the MPI backend, blocking and async, f32/bf16 (and f16), sum and avg, on
// sizes that do and do not divide by the world size. Run under mpirun -np 2 and -np 4. Values
// are small integers so the expected results are exact, except the bf16 rounding case, whose
// result is predicted with the reference conversion.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "tests/common/test_world.h"
#include "typed_buffer.h"

namespace sluice::testing {
namespace {

constexpr size_t kSizes[] = {0, 1, 7, 1000, 1001, 4099};
constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

::testing::AssertionResult Holds(const TypedBuffer& buffer, size_t begin, size_t end,
                                 const std::function<float(size_t)>& expected) {
  size_t wrong = 0;
  size_t first = 0;
  for (size_t i = begin; i < end; ++i) {
    if (buffer.Get(i) != expected(i)) {
      if (wrong++ == 0) first = i;
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << wrong << " wrong elements; first at " << first << ": got "
                                       << buffer.Get(first) << ", expected " << expected(first);
}

// Waits like a caller that overlaps work: polls Test() until the handle finishes.
Status PollUntilDone(CommHandle handle) {
  while (!handle.Test()) std::this_thread::yield();
  return handle.Wait();
}

float TriangularSum(int world) { return static_cast<float>(world * (world + 1) / 2); }

TEST(MpiComm, ReportsRankSizeAndBackend) {
  Comm& world = TestWorld();
  EXPECT_GE(world.size(), 1);
  EXPECT_GE(world.rank(), 0);
  EXPECT_LT(world.rank(), world.size());
  EXPECT_EQ(world.backend_name(), "mpi");
  EXPECT_EQ(world.name(), "world");
  EXPECT_EQ(world.timeout_seconds(), kTestTimeoutSeconds);
}

TEST(MpiComm, AllReduceSumAndAverage) {
  Comm& world = TestWorld();
  const int w = world.size();
  for (DType dtype : kDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (size_t n : kSizes) {
        for (bool async : {false, true}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ReduceOpName(op)
                                            << " n=" << n << (async ? " async" : " blocking"));
          TypedBuffer buffer(dtype, n);
          for (size_t i = 0; i < n; ++i) buffer.Set(i, (world.rank() + 1) * (i % 7 + 1.0f));
          const Status status =
              async ? PollUntilDone(world.AllReduceAsync(buffer.data(), n, dtype, op))
                    : world.AllReduce(buffer.data(), n, dtype, op);
          ASSERT_TRUE(status.ok()) << status.ToString();
          EXPECT_TRUE(Holds(buffer, 0, n, [&](size_t i) {
            const float sum = (i % 7 + 1.0f) * TriangularSum(w);
            return RoundTo(dtype, op == ReduceOp::kSum ? sum : sum / w);
          }));
        }
      }
    }
  }
}

// 256 + 3 = 259 and 256 + 1 = 257 are not bf16 values: they round to nearest even, 260 and
// 256. Only the partial sums holding both rank 0's and rank 1's value need rounding, so the
// result does not depend on the order MPI combines them in.
TEST(MpiComm, AllReduceBf16RoundsEachAdditionToNearestEven) {
  Comm& world = TestWorld();
  const int w = world.size();
  const size_t n = 1001;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    SCOPED_TRACE(ReduceOpName(op));
    TypedBuffer buffer(DType::kBF16, n);
    for (size_t i = 0; i < n; ++i) {
      const float mine = world.rank() == 0 ? 256.0f : world.rank() == 1 ? (i % 2 ? 1.0f : 3.0f) : 0;
      buffer.Set(i, mine);
    }
    ASSERT_TRUE(world.AllReduce(buffer.data(), n, DType::kBF16, op).ok());
    EXPECT_TRUE(Holds(buffer, 0, n, [&](size_t i) {
      const float sum = RoundTo(DType::kBF16, 256.0f + (i % 2 ? 1.0f : 3.0f));
      EXPECT_EQ(sum, i % 2 ? 256.0f : 260.0f);  // what the reference conversion predicts
      return op == ReduceOp::kSum ? sum : RoundTo(DType::kBF16, sum / w);
    }));
  }
}

TEST(MpiComm, AllGatherAnySize) {
  Comm& world = TestWorld();
  enum Mode { kSeparate, kInPlace, kAsync };
  for (DType dtype : kDTypes) {
    for (size_t n : kSizes) {
      for (Mode mode : {kSeparate, kInPlace, kAsync}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n=" << n << " mode=" << mode);
        auto value = [](size_t g) { return static_cast<float>(g % 200 + 1); };
        const ShardSpan mine = world.Shard(n);
        TypedBuffer full(dtype, n);
        TypedBuffer shard(dtype, mine.count);
        for (size_t j = 0; j < mine.count; ++j) {
          shard.Set(j, value(mine.offset + j));
          full.Set(mine.offset + j, mode == kInPlace ? value(mine.offset + j) : -1.0f);
        }
        const void* source = mode == kInPlace ? full.at(mine.offset) : shard.data();
        const Status status =
            mode == kAsync ? PollUntilDone(world.AllGatherAsync(source, full.data(), n, dtype))
                           : world.AllGather(source, full.data(), n, dtype);
        ASSERT_TRUE(status.ok()) << status.ToString();
        EXPECT_TRUE(Holds(full, 0, n, value));
      }
    }
  }
}

TEST(MpiComm, ReduceScatterAnySizeSumAndAverage) {
  Comm& world = TestWorld();
  const int w = world.size();
  enum Mode { kSeparate, kInPlace, kAsync };
  for (DType dtype : kDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (size_t n : kSizes) {
        for (Mode mode : {kSeparate, kInPlace, kAsync}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ReduceOpName(op)
                                            << " n=" << n << " mode=" << mode);
          const ShardSpan mine = world.Shard(n);
          TypedBuffer full(dtype, n);
          for (size_t g = 0; g < n; ++g) full.Set(g, (world.rank() + 1) * (g % 13 + 1.0f));
          TypedBuffer shard(dtype, mine.count);
          void* target = mode == kInPlace ? full.at(mine.offset) : shard.data();
          const Status status =
              mode == kAsync
                  ? PollUntilDone(world.ReduceScatterAsync(full.data(), target, n, dtype, op))
                  : world.ReduceScatter(full.data(), target, n, dtype, op);
          ASSERT_TRUE(status.ok()) << status.ToString();
          const TypedBuffer& result = mode == kInPlace ? full : shard;
          const size_t base = mode == kInPlace ? mine.offset : 0;
          EXPECT_TRUE(Holds(result, base, base + mine.count, [&](size_t i) {
            const size_t g = mine.offset + (i - base);
            const float sum = (g % 13 + 1.0f) * TriangularSum(w);
            return RoundTo(dtype, op == ReduceOp::kSum ? sum : sum / w);
          }));
        }
      }
    }
  }
}

TEST(MpiComm, BroadcastFromEachRoot) {
  Comm& world = TestWorld();
  for (int root = 0; root < world.size(); ++root) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (size_t n : {size_t{1}, size_t{1001}}) {
        for (bool async : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "root " << root << " " << DTypeName(dtype)
                                            << " n=" << n << (async ? " async" : ""));
          auto value = [root](size_t i) { return static_cast<float>((root * 37 + i) % 200); };
          TypedBuffer buffer(dtype, n);
          if (world.rank() == root) {
            for (size_t i = 0; i < n; ++i) buffer.Set(i, value(i));
          }
          const Status status =
              async ? PollUntilDone(world.BroadcastAsync(buffer.data(), n, dtype, root))
                    : world.Broadcast(buffer.data(), n, dtype, root);
          ASSERT_TRUE(status.ok()) << status.ToString();
          EXPECT_TRUE(Holds(buffer, 0, n, value));
        }
      }
    }
  }
}

TEST(MpiComm, SendRecvRing) {
  Comm& world = TestWorld();
  const int w = world.size();
  const int right = (world.rank() + 1) % w;
  const int left = (world.rank() + w - 1) % w;
  const size_t n = 1001;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    TypedBuffer out(dtype, n);
    TypedBuffer in(dtype, n);
    for (size_t i = 0; i < n; ++i) out.Set(i, static_cast<float>(world.rank() * 10 + i % 10));
    // Receive first so the blocking send cannot wait on a receive that is not posted.
    CommHandle receive = world.RecvAsync(in.data(), n, dtype, left, /*tag=*/7);
    ASSERT_TRUE(world.Send(out.data(), n, dtype, right, 7).ok());
    ASSERT_TRUE(receive.Wait().ok());
    EXPECT_TRUE(Holds(in, 0, n, [&](size_t i) { return static_cast<float>(left * 10 + i % 10); }));

    // Two messages in flight between the same pair, told apart by tag.
    TypedBuffer first(dtype, n);
    TypedBuffer second(dtype, n);
    CommHandle r2 = world.RecvAsync(second.data(), n, dtype, left, 2);
    CommHandle r1 = world.RecvAsync(first.data(), n, dtype, left, 1);
    TypedBuffer out2(dtype, n, 5.0f);
    CommHandle s1 = world.SendAsync(out.data(), n, dtype, right, 1);
    CommHandle s2 = world.SendAsync(out2.data(), n, dtype, right, 2);
    for (CommHandle* h : {&s1, &s2, &r1, &r2}) ASSERT_TRUE(h->Wait().ok());
    EXPECT_TRUE(
        Holds(first, 0, n, [&](size_t i) { return static_cast<float>(left * 10 + i % 10); }));
    EXPECT_TRUE(Holds(second, 0, n, [](size_t) { return 5.0f; }));
  }
}

TEST(MpiComm, RecvOfTheWrongLengthFails) {
  Comm& world = TestWorld();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int w = world.size();
  TypedBuffer out(DType::kF32, 5, 1.0f);
  TypedBuffer in(DType::kF32, 6);
  CommHandle receive = world.RecvAsync(in.data(), 6, DType::kF32, (world.rank() + w - 1) % w, 3);
  ASSERT_TRUE(world.Send(out.data(), 5, DType::kF32, (world.rank() + 1) % w, 3).ok());
  const Status status = receive.Wait();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("carried 5 elements, not 6"), std::string::npos)
      << status.message();
}

TEST(MpiComm, BarrierWaitsForTheLastRank) {
  Comm& world = TestWorld();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  for (bool async : {false, true}) {
    ASSERT_TRUE(world.Barrier().ok());  // start together
    const auto start = std::chrono::steady_clock::now();
    if (world.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE((async ? PollUntilDone(world.BarrierAsync()) : world.Barrier()).ok());
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Margin for the ranks leaving the first barrier at slightly different times.
    EXPECT_GE(waited, 0.2) << "rank " << world.rank() << " left the barrier before rank 0 came";
  }
}

TEST(MpiComm, AsyncOperationsOverlapAndCompleteInAnyWaitOrder) {
  Comm& world = TestWorld();
  const int w = world.size();
  const size_t n = 1001;
  const ShardSpan mine = world.Shard(n);
  TypedBuffer reduced(DType::kBF16, n, static_cast<float>(world.rank() + 1));
  TypedBuffer gathered(DType::kF32, n);
  TypedBuffer shard(DType::kF32, mine.count);
  for (size_t j = 0; j < mine.count; ++j) shard.Set(j, static_cast<float>(mine.offset + j));
  TypedBuffer scattered_in(DType::kF32, n, 2.0f);
  TypedBuffer scattered(DType::kF32, mine.count);
  TypedBuffer broadcast(DType::kF32, n, world.rank() == w - 1 ? 9.0f : 0.0f);

  CommHandle a = world.AllReduceAsync(reduced.data(), n, DType::kBF16, ReduceOp::kSum);
  CommHandle b = world.AllGatherAsync(shard.data(), gathered.data(), n, DType::kF32);
  CommHandle c = world.ReduceScatterAsync(scattered_in.data(), scattered.data(), n, DType::kF32,
                                          ReduceOp::kAvg);
  CommHandle d = world.BroadcastAsync(broadcast.data(), n, DType::kF32, w - 1);
  EXPECT_FALSE(a.finished() && b.finished() && c.finished() && d.finished());
  for (CommHandle* h : {&d, &c, &b, &a}) ASSERT_TRUE(h->Wait().ok());
  EXPECT_TRUE(Holds(reduced, 0, n, [&](size_t) { return TriangularSum(w); }));
  EXPECT_TRUE(Holds(gathered, 0, n, [](size_t g) { return static_cast<float>(g); }));
  EXPECT_TRUE(Holds(scattered, 0, mine.count, [](size_t) { return 2.0f; }));
  EXPECT_TRUE(Holds(broadcast, 0, n, [](size_t) { return 9.0f; }));
}

TEST(MpiComm, SplitByParityThenCollectivesInEachColour) {
  Comm& world = TestWorld();
  const int color = world.rank() % 2;
  Result<std::unique_ptr<Comm>> sub = world.Split(color, world.rank());
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  Comm& part = **sub;
  EXPECT_EQ(part.size(), (world.size() + 1 - color) / 2);
  EXPECT_EQ(part.rank(), world.rank() / 2);
  EXPECT_EQ(part.name(), color == 0 ? "world/split(0)" : "world/split(1)");
  EXPECT_EQ(part.timeout_seconds(), world.timeout_seconds());

  // Sum of (world rank + 1) over the colour: 1+3+... for even ranks, 2+4+... for odd ones.
  float expected = 0;
  for (int r = color; r < world.size(); r += 2) expected += r + 1.0f;
  TypedBuffer buffer(DType::kF32, 7, world.rank() + 1.0f);
  ASSERT_TRUE(part.AllReduce(buffer.data(), 7, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_TRUE(Holds(buffer, 0, 7, [&](size_t) { return expected; }));

  // A gather in the sub-communicator uses its own ranks and shards.
  const size_t n = 7;
  const ShardSpan mine = part.Shard(n);
  TypedBuffer full(DType::kBF16, n);
  for (size_t j = 0; j < mine.count; ++j)
    full.Set(mine.offset + j, color * 100.0f + mine.offset + j);
  ASSERT_TRUE(part.AllGather(full.at(mine.offset), full.data(), n, DType::kBF16).ok());
  EXPECT_TRUE(Holds(full, 0, n, [&](size_t g) { return color * 100.0f + g; }));
  ASSERT_TRUE(world.Barrier().ok());  // the parent stays usable beside its children
}

TEST(MpiComm, SplitWithNegativeColourJoinsNone) {
  Comm& world = TestWorld();
  const bool joins = world.rank() % 2 == 0;
  Result<std::unique_ptr<Comm>> sub = world.Split(joins ? 5 : -1, -world.rank());
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  if (!joins) {
    EXPECT_EQ(*sub, nullptr);
    return;
  }
  ASSERT_NE(*sub, nullptr);
  // Keys are negated world ranks: the highest even world rank is rank 0 of the colour.
  EXPECT_EQ((*sub)->rank(), ((world.size() - 1) / 2) - world.rank() / 2);
  ASSERT_TRUE((*sub)->Barrier().ok());
}

TEST(MpiComm, InvalidArgumentsFailLocallyWithoutPosting) {
  Comm& world = TestWorld();
  TypedBuffer buffer(DType::kF32, 8);
  Status status = world.Broadcast(buffer.data(), 8, DType::kF32, world.size());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("root"), std::string::npos) << status.message();
  status = world.AllGather(buffer.at(1), buffer.data(), 8, DType::kF32);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("overlaps"), std::string::npos) << status.message();
  status = world.Send(buffer.data(), 8, DType::kF32, 0, -1);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  status = world.AllReduce(nullptr, 8, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(world.Barrier().ok());  // nothing was posted: the ranks are still in step
}

}  // namespace
}  // namespace sluice::testing
