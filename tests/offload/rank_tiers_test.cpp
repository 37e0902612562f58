// offload::RankTiers, the one per-rank owner of the I/O engine and the pinned staging budget: no
// engine until an NVMe tier asks for one, then the same engine for every swap store (counted by
// AioEngine::created_count), and reservations that add up, refuse past the limit naming who
// asked, and come back when released.
#include "offload/rank_tiers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "offload/aio_engine.h"
#include "offload/aligned_buffer.h"
#include "offload/swap_store.h"
#include "tests/offload/test_support.h"

namespace sluice::offload {
namespace {

using ::testing::HasSubstr;

TEST(RankTiersTest, MakesOneEngineOnFirstUseAndSharesItBetweenStores) {
  testutil::TempDir dir;
  const int64_t created_before = AioEngine::created_count();
  const int64_t live_before = AioEngine::live_count();
  {
    RankTiers tiers({.rank = 3});
    EXPECT_EQ(tiers.aio_if_created(), nullptr);
    EXPECT_EQ(AioEngine::created_count(), created_before) << "an engine before any NVMe tier";

    SwapStoreOptions a;
    a.paths = {dir.path()};
    a.rank = tiers.rank();
    a.file_name = "a.swp";
    a.remove_on_close = true;
    SwapStoreOptions b = a;
    b.file_name = "b.swp";
    Result<std::unique_ptr<SwapStore>> first = tiers.OpenSwapStore(a, "store a");
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    Result<std::unique_ptr<SwapStore>> second = tiers.OpenSwapStore(b, "store b");
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    Result<AioEngine*> aio = tiers.Aio("a third user");
    ASSERT_TRUE(aio.ok());
    EXPECT_EQ(*aio, tiers.aio_if_created());
    EXPECT_EQ(AioEngine::created_count(), created_before + 1);
    EXPECT_EQ(AioEngine::live_count(), live_before + 1);

    // Both stores do I/O through it.
    Result<AlignedBuffer> out = AlignedBuffer::Allocate(kIoAlignment);
    ASSERT_TRUE(out.ok());
    for (SwapStore* store : {first->get(), second->get()}) {
      Result<SwapExtent> extent = store->Allocate("e", out->size());
      ASSERT_TRUE(extent.ok()) << extent.status().ToString();
      EXPECT_TRUE(store->WriteAsync("e", out->data(), out->size()).Wait().ok());
    }
    EXPECT_GE((*aio)->stats().bytes_written, 2 * out->size());
  }
  EXPECT_EQ(AioEngine::live_count(), live_before) << "the tiers' engine outlived them";
}

TEST(RankTiersTest, StoreErrorsNameTheirStore) {
  RankTiers tiers({.rank = 0});
  SwapStoreOptions options;
  options.paths = {"/proc/no_such_dir_for_sluice"};
  Result<std::unique_ptr<SwapStore>> store = tiers.OpenSwapStore(options, "the test's store");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().ToString(), HasSubstr("the test's store"));
}

TEST(PinnedStagingBudgetTest, CountsRefusesPastTheLimitAndReleases) {
  PinnedStagingBudget budget(10000);
  {
    Result<StagingReservation> ring = StagingReservation::Make(&budget, 6000, "the ring");
    ASSERT_TRUE(ring.ok());
    EXPECT_EQ(budget.reserved(), 6000u);
    Result<StagingReservation> more = StagingReservation::Make(&budget, 5000, "the reads");
    ASSERT_FALSE(more.ok());
    EXPECT_EQ(more.status().code(), StatusCode::kResourceExhausted);
    EXPECT_THAT(more.status().message(), HasSubstr("the reads"));
    EXPECT_THAT(more.status().message(), HasSubstr("6000"));
    EXPECT_EQ(budget.reserved(), 6000u) << "a refused reservation must not count";
    StagingReservation moved = std::move(ring).value();
    Result<StagingReservation> fits = StagingReservation::Make(&budget, 4000, "the reads");
    ASSERT_TRUE(fits.ok());
    EXPECT_EQ(budget.reserved(), 10000u);
  }
  EXPECT_EQ(budget.reserved(), 0u);
  EXPECT_EQ(budget.peak(), 10000u);
  // No limit, and no budget at all: nothing is refused.
  PinnedStagingBudget unbounded;
  EXPECT_TRUE(StagingReservation::Make(&unbounded, uint64_t{1} << 40, "big").ok());
  EXPECT_TRUE(StagingReservation::Make(nullptr, 123, "unbudgeted").ok());
}

}  // namespace
}  // namespace sluice::offload
