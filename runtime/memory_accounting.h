// Process-wide memory ledger: every allocation is tagged by tier (device, host_pinned, host, nvme)
// and category (params, grads, optimizer, activations, buffers); current and peak bytes can be
// queried per tier x category and per tier, and reported as a table or JSON.
//
// Device and pinned allocations (runtime/device.h) are charged automatically. Anything allocated
// elsewhere (host buffers, NVMe extents) holds a MemoryCharge for as long as the bytes are held:
//
//   MemoryCharge charge(MemoryTier::kNvme, MemoryCategory::kOptimizer, extent_bytes);
//
// Updates are lock-free (atomics) and safe from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "runtime/memory_kinds.h"

namespace sluice {

struct MemoryUsage {
  uint64_t current = 0;
  uint64_t peak = 0;  // highest `current` since creation or the last ResetPeaks()
};

// A copy of the ledger at one moment (each counter read atomically, not all of them together).
struct MemorySnapshot {
  std::array<std::array<MemoryUsage, kNumMemoryCategories>, kNumMemoryTiers> by_tier_category{};
  std::array<MemoryUsage, kNumMemoryTiers> by_tier{};

  const MemoryUsage& at(MemoryTier tier, MemoryCategory category) const {
    return by_tier_category[static_cast<int>(tier)][static_cast<int>(category)];
  }
  const MemoryUsage& tier(MemoryTier tier) const { return by_tier[static_cast<int>(tier)]; }

  // One line per tier and category that was ever used since the last peak reset, plus a total
  // line per tier:
  //   tier         category        current         peak
  //   device       params        12.00 MiB    20.00 MiB
  //   device       total         12.00 MiB    20.00 MiB
  std::string FormatTable() const;
  // {"device": {"current": 1, "peak": 2, "categories": {"params": {"current": 1, "peak": 2},
  // ...}}, "host_pinned": {...}, ...}: every tier and category, in bytes.
  nlohmann::json ToJson() const;
};

class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // The ledger devices and MemoryCharge use unless told otherwise.
  static MemoryLedger& Global();

  void Add(MemoryTier tier, MemoryCategory category, uint64_t bytes);
  // CHECK-fails when more is removed than was added (an accounting bug, not a user error).
  void Remove(MemoryTier tier, MemoryCategory category, uint64_t bytes);

  MemorySnapshot Snapshot() const;
  // Sets every peak to its current value, e.g. at the start of a training step.
  void ResetPeaks();

 private:
  struct Counter {
    std::atomic<uint64_t> current{0};
    std::atomic<uint64_t> peak{0};
  };
  Counter& cell(MemoryTier tier, MemoryCategory category) {
    return cells_[static_cast<int>(tier)][static_cast<int>(category)];
  }

  std::array<std::array<Counter, kNumMemoryCategories>, kNumMemoryTiers> cells_;
  std::array<Counter, kNumMemoryTiers> tiers_;
};

// RAII: holds `bytes` of (tier, category) in a ledger until released or destroyed. Move-only.
class MemoryCharge {
 public:
  MemoryCharge() = default;
  MemoryCharge(MemoryTier tier, MemoryCategory category, uint64_t bytes,
               MemoryLedger& ledger = MemoryLedger::Global());
  MemoryCharge(MemoryCharge&& other) noexcept;
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;
  ~MemoryCharge() { Release(); }

  // Changes the charged amount in place (a buffer or extent that grows or shrinks).
  void Resize(uint64_t bytes);
  void Release();

  uint64_t bytes() const { return bytes_; }
  MemoryTier tier() const { return tier_; }
  MemoryCategory category() const { return category_; }

 private:
  MemoryLedger* ledger_ = nullptr;
  MemoryTier tier_ = MemoryTier::kHost;
  MemoryCategory category_ = MemoryCategory::kBuffers;
  uint64_t bytes_ = 0;
};

}  // namespace sluice
