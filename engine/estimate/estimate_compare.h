// Predicted against measured: an estimate's bytes beside the memory ledger's peaks, per tier and
// category, for the end of `sluice train` and for tests of the estimator against real runs.
//
//   auto rows = ComparePeaks(estimate, MemoryLedger::Global().Snapshot());
//   std::fputs(FormatPeakComparison(rows).c_str(), stdout);
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/estimate/memory_estimate.h"
#include "runtime/memory_accounting.h"

namespace sluice::estimate {

struct PeakRow {
  MemoryTier tier = MemoryTier::kDevice;
  std::optional<MemoryCategory> category;  // nullopt: the tier's total
  int64_t predicted = 0;
  int64_t measured = 0;  // the ledger's peak
  // measured / predicted - 1 ("+3.2%"); nullopt when nothing was predicted.
  std::optional<double> deviation() const;
};

// Every (tier, category) that was predicted or measured, then each such tier's total. The total
// predicted is the sum of the category peaks, which may happen at different moments, so it
// bounds the measured tier peak from above when every category is right.
std::vector<PeakRow> ComparePeaks(const MemoryEstimate& estimate, const MemorySnapshot& snapshot);

//   tier         category     predicted    measured   deviation
//   device       params       12.00 MiB   12.00 MiB      +0.0%
std::string FormatPeakComparison(const std::vector<PeakRow>& rows);
// [{"tier": "device", "category": "params" (or "total"), "predicted": b, "measured": b}, ...]
nlohmann::json PeakComparisonJson(const std::vector<PeakRow>& rows);

}  // namespace sluice::estimate
