#include "runtime/memory_accounting.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MemoryLedger, TracksCurrentAndPeakPerTierAndCategory) {
  MemoryLedger ledger;
  ledger.Add(MemoryTier::kDevice, MemoryCategory::kParams, 100);
  ledger.Add(MemoryTier::kDevice, MemoryCategory::kGrads, 50);
  ledger.Add(MemoryTier::kHost, MemoryCategory::kOptimizer, 7);
  ledger.Remove(MemoryTier::kDevice, MemoryCategory::kParams, 60);
  ledger.Add(MemoryTier::kDevice, MemoryCategory::kGrads, 5);

  const MemorySnapshot s = ledger.Snapshot();
  EXPECT_EQ(s.at(MemoryTier::kDevice, MemoryCategory::kParams).current, 40u);
  EXPECT_EQ(s.at(MemoryTier::kDevice, MemoryCategory::kParams).peak, 100u);
  EXPECT_EQ(s.at(MemoryTier::kDevice, MemoryCategory::kGrads).current, 55u);
  EXPECT_EQ(s.at(MemoryTier::kDevice, MemoryCategory::kGrads).peak, 55u);
  EXPECT_EQ(s.tier(MemoryTier::kDevice).current, 95u);
  EXPECT_EQ(s.tier(MemoryTier::kDevice).peak, 150u);  // 100 + 50 before the 60 went away
  EXPECT_EQ(s.at(MemoryTier::kHost, MemoryCategory::kOptimizer).current, 7u);
  EXPECT_EQ(s.tier(MemoryTier::kHost).peak, 7u);
  EXPECT_EQ(s.tier(MemoryTier::kNvme).peak, 0u);
  EXPECT_EQ(s.tier(MemoryTier::kHostPinned).current, 0u);
}

TEST(MemoryLedger, ResetPeaksLowersPeaksToCurrent) {
  MemoryLedger ledger;
  ledger.Add(MemoryTier::kNvme, MemoryCategory::kOptimizer, 1000);
  ledger.Remove(MemoryTier::kNvme, MemoryCategory::kOptimizer, 900);
  ledger.ResetPeaks();
  MemorySnapshot s = ledger.Snapshot();
  EXPECT_EQ(s.at(MemoryTier::kNvme, MemoryCategory::kOptimizer).peak, 100u);
  EXPECT_EQ(s.tier(MemoryTier::kNvme).peak, 100u);
  ledger.Add(MemoryTier::kNvme, MemoryCategory::kOptimizer, 20);
  s = ledger.Snapshot();
  EXPECT_EQ(s.tier(MemoryTier::kNvme).peak, 120u);
}

TEST(MemoryLedger, ConcurrentUpdatesBalance) {
  MemoryLedger ledger;
  constexpr int kThreads = 8;
  constexpr int kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ledger, t] {
      const auto category = static_cast<MemoryCategory>(t % kNumMemoryCategories);
      for (int i = 0; i < kRounds; ++i) {
        ledger.Add(MemoryTier::kHost, category, 3);
        ledger.Remove(MemoryTier::kHost, category, 3);
      }
      ledger.Add(MemoryTier::kHost, category, 1);  // each thread leaves one byte
    });
  }
  for (auto& thread : threads) thread.join();
  const MemorySnapshot s = ledger.Snapshot();
  EXPECT_EQ(s.tier(MemoryTier::kHost).current, static_cast<uint64_t>(kThreads));
  // The peak was reached by some interleaving: at least one thread's 3, at most all at once.
  EXPECT_GE(s.tier(MemoryTier::kHost).peak, 3u);
  EXPECT_LE(s.tier(MemoryTier::kHost).peak, static_cast<uint64_t>(kThreads * 3 + kThreads));
  uint64_t sum = 0;
  for (MemoryCategory c : kAllMemoryCategories) sum += s.at(MemoryTier::kHost, c).current;
  EXPECT_EQ(sum, static_cast<uint64_t>(kThreads));
}

TEST(MemoryCharge, ReleasesOnDestructionAndFollowsMoves) {
  MemoryLedger ledger;
  {
    MemoryCharge a(MemoryTier::kHost, MemoryCategory::kBuffers, 64, ledger);
    EXPECT_EQ(ledger.Snapshot().tier(MemoryTier::kHost).current, 64u);
    MemoryCharge b = std::move(a);
    EXPECT_EQ(a.bytes(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(b.bytes(), 64u);
    EXPECT_EQ(ledger.Snapshot().tier(MemoryTier::kHost).current, 64u);
    b.Resize(100);
    EXPECT_EQ(ledger.Snapshot().at(MemoryTier::kHost, MemoryCategory::kBuffers).current, 100u);
    b.Resize(10);
    EXPECT_EQ(ledger.Snapshot().at(MemoryTier::kHost, MemoryCategory::kBuffers).current, 10u);
    MemoryCharge c(MemoryTier::kNvme, MemoryCategory::kParams, 5, ledger);
    c = std::move(b);  // c's own 5 bytes are released first
    EXPECT_EQ(ledger.Snapshot().tier(MemoryTier::kNvme).current, 0u);
    EXPECT_EQ(ledger.Snapshot().tier(MemoryTier::kHost).current, 10u);
  }
  const MemorySnapshot s = ledger.Snapshot();
  EXPECT_EQ(s.tier(MemoryTier::kHost).current, 0u);
  EXPECT_EQ(s.tier(MemoryTier::kHost).peak, 100u);
}

TEST(MemoryLedger, RemovingMoreThanChargedIsABug) {
  MemoryLedger ledger;
  ledger.Add(MemoryTier::kDevice, MemoryCategory::kParams, 10);
  EXPECT_DEATH(ledger.Remove(MemoryTier::kDevice, MemoryCategory::kParams, 11),
               "memory ledger underflow");
}

TEST(MemorySnapshot, TableListsUsedRowsAndTotals) {
  MemoryLedger ledger;
  ledger.Add(MemoryTier::kDevice, MemoryCategory::kParams, 12 * 1024 * 1024);
  ledger.Add(MemoryTier::kHostPinned, MemoryCategory::kOptimizer, 3 * 1024);
  const std::string table = ledger.Snapshot().FormatTable();
  EXPECT_THAT(table, HasSubstr("tier"));
  EXPECT_THAT(table, HasSubstr("device       params          12.00 MiB    12.00 MiB"));
  EXPECT_THAT(table, HasSubstr("device       total           12.00 MiB    12.00 MiB"));
  EXPECT_THAT(table, HasSubstr("host_pinned  optimizer        3.00 KiB     3.00 KiB"));
  EXPECT_THAT(table, Not(HasSubstr("nvme")));
  EXPECT_THAT(table, Not(HasSubstr("grads")));
}

TEST(MemorySnapshot, JsonHasEveryTierAndCategory) {
  MemoryLedger ledger;
  ledger.Add(MemoryTier::kNvme, MemoryCategory::kOptimizer, 42);
  ledger.Remove(MemoryTier::kNvme, MemoryCategory::kOptimizer, 2);
  const nlohmann::json json = ledger.Snapshot().ToJson();
  ASSERT_EQ(json.size(), 4u);
  for (const char* tier : {"device", "host_pinned", "host", "nvme"}) {
    ASSERT_TRUE(json.contains(tier)) << tier;
    EXPECT_EQ(json[tier]["categories"].size(), 5u);
  }
  EXPECT_EQ(json["nvme"]["current"], 40);
  EXPECT_EQ(json["nvme"]["peak"], 42);
  EXPECT_EQ(json["nvme"]["categories"]["optimizer"]["current"], 40);
  EXPECT_EQ(json["nvme"]["categories"]["optimizer"]["peak"], 42);
  EXPECT_EQ(json["device"]["categories"]["activations"]["peak"], 0);
}

}  // namespace
}  // namespace sluice
