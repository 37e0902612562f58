#include "runtime/memory_accounting.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/check.h"
#include "runtime/size_format.h"

namespace sluice {
namespace {

void RaiseTo(std::atomic<uint64_t>& peak, uint64_t value) {
  uint64_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void AddTo(std::atomic<uint64_t>& current, std::atomic<uint64_t>& peak, uint64_t bytes) {
  RaiseTo(peak, current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void RemoveFrom(std::atomic<uint64_t>& current, uint64_t bytes, MemoryTier tier,
                MemoryCategory category) {
  const uint64_t before = current.fetch_sub(bytes, std::memory_order_relaxed);
  SLUICE_CHECK(before >= bytes) << "memory ledger underflow: releasing " << bytes << " bytes of "
                                << MemoryTierName(tier) << "/" << MemoryCategoryName(category)
                                << " with only " << before << " charged";
}

nlohmann::json UsageJson(const MemoryUsage& usage) {
  return {{"current", usage.current}, {"peak", usage.peak}};
}

}  // namespace

MemoryLedger& MemoryLedger::Global() {
  static MemoryLedger* ledger = new MemoryLedger();  // never destroyed: used until exit
  return *ledger;
}

void MemoryLedger::Add(MemoryTier tier, MemoryCategory category, uint64_t bytes) {
  if (bytes == 0) return;
  Counter& c = cell(tier, category);
  AddTo(c.current, c.peak, bytes);
  Counter& t = tiers_[static_cast<int>(tier)];
  AddTo(t.current, t.peak, bytes);
}

void MemoryLedger::Remove(MemoryTier tier, MemoryCategory category, uint64_t bytes) {
  if (bytes == 0) return;
  RemoveFrom(cell(tier, category).current, bytes, tier, category);
  RemoveFrom(tiers_[static_cast<int>(tier)].current, bytes, tier, category);
}

MemorySnapshot MemoryLedger::Snapshot() const {
  MemorySnapshot snapshot;
  for (int t = 0; t < kNumMemoryTiers; ++t) {
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      snapshot.by_tier_category[t][c] = {cells_[t][c].current.load(std::memory_order_relaxed),
                                         cells_[t][c].peak.load(std::memory_order_relaxed)};
    }
    snapshot.by_tier[t] = {tiers_[t].current.load(std::memory_order_relaxed),
                           tiers_[t].peak.load(std::memory_order_relaxed)};
  }
  return snapshot;
}

void MemoryLedger::ResetPeaks() {
  for (int t = 0; t < kNumMemoryTiers; ++t) {
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      cells_[t][c].peak.store(cells_[t][c].current.load(std::memory_order_relaxed),
                              std::memory_order_relaxed);
    }
    tiers_[t].peak.store(tiers_[t].current.load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
  }
}

std::string MemorySnapshot::FormatTable() const {
  std::string out =
      fmt::format("{:<12} {:<12} {:>12} {:>12}\n", "tier", "category", "current", "peak");
  for (MemoryTier t : kAllMemoryTiers) {
    if (tier(t).peak == 0) continue;
    for (MemoryCategory c : kAllMemoryCategories) {
      const MemoryUsage& usage = at(t, c);
      if (usage.peak == 0) continue;
      out += fmt::format("{:<12} {:<12} {:>12} {:>12}\n", MemoryTierName(t), MemoryCategoryName(c),
                         FormatBytes(usage.current), FormatBytes(usage.peak));
    }
    out += fmt::format("{:<12} {:<12} {:>12} {:>12}\n", MemoryTierName(t), "total",
                       FormatBytes(tier(t).current), FormatBytes(tier(t).peak));
  }
  return out;
}

nlohmann::json MemorySnapshot::ToJson() const {
  nlohmann::json out = nlohmann::json::object();
  for (MemoryTier t : kAllMemoryTiers) {
    nlohmann::json tier_json = UsageJson(tier(t));
    nlohmann::json categories = nlohmann::json::object();
    for (MemoryCategory c : kAllMemoryCategories) {
      categories[std::string(MemoryCategoryName(c))] = UsageJson(at(t, c));
    }
    tier_json["categories"] = std::move(categories);
    out[std::string(MemoryTierName(t))] = std::move(tier_json);
  }
  return out;
}

MemoryCharge::MemoryCharge(MemoryTier tier, MemoryCategory category, uint64_t bytes,
                           MemoryLedger& ledger)
    : ledger_(&ledger), tier_(tier), category_(category), bytes_(bytes) {
  ledger_->Add(tier_, category_, bytes_);
}

MemoryCharge::MemoryCharge(MemoryCharge&& other) noexcept
    : ledger_(std::exchange(other.ledger_, nullptr)),
      tier_(other.tier_),
      category_(other.category_),
      bytes_(std::exchange(other.bytes_, 0)) {}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    Release();
    ledger_ = std::exchange(other.ledger_, nullptr);
    tier_ = other.tier_;
    category_ = other.category_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryCharge::Resize(uint64_t bytes) {
  SLUICE_CHECK(ledger_ != nullptr) << "MemoryCharge::Resize on an empty charge";
  if (bytes > bytes_) {
    ledger_->Add(tier_, category_, bytes - bytes_);
  } else {
    ledger_->Remove(tier_, category_, bytes_ - bytes);
  }
  bytes_ = bytes;
}

void MemoryCharge::Release() {
  if (ledger_ != nullptr) ledger_->Remove(tier_, category_, bytes_);
  ledger_ = nullptr;
  bytes_ = 0;
}

}  // namespace sluice
