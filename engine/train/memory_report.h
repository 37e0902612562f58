// Predicted against measured memory at the end of `sluice train`: for every tier and category,
// the estimator's prediction for the resolved config and world size (engine/estimate), this
// rank's peak over the whole run (set-up, steps and evaluations), their ratio, and with several
// ranks the largest peak of any rank.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/estimate_compare.h"
#include "runtime/comm.h"
#include "runtime/memory_accounting.h"
#include "runtime/status.h"

namespace sluice::train {

// Raises each peak of `into` (every tier and category) to the one in `now`.
void MergePeaks(MemorySnapshot& into, const MemorySnapshot& now);

struct MemoryReport {
  int rank = 0;
  int world_size = 1;
  int stage = 0;
  // Each tier and category that was predicted or measured on any rank, then the tier's total
  // (estimate::ComparePeaks); `measured` is this rank's.
  std::vector<estimate::PeakRow> rows;
  // Per row, the largest measured peak over the ranks (world_size > 1 only).
  std::vector<int64_t> max_over_ranks;
  // Why there is no prediction (the estimator refused the config); empty when there is one.
  std::string estimate_error;
};

// Collective over `world`: the estimate of this rank's share of `config` on world.size() ranks
// (its pipeline stage's under the config's schedule, where there are stages) against
// `run_peaks`.
Result<MemoryReport> BuildMemoryReport(const Config& config, Comm& world,
                                       const MemorySnapshot& run_peaks);

//   memory: peak per rank (rank 0 of 2) against `sluice estimate` for stage 2 on 2 ranks
//     tier        category      predicted     measured   ratio   max of 2 ranks
//     device      params        148.0 KiB    148.0 KiB   1.000        148.0 KiB
std::string FormatMemoryReport(const MemoryReport& report);
// {"rank", "world_size", "stage", "estimate_error" (or null), "rows": [{"tier", "category"
// ("total" for the tier), "predicted", "measured", "ratio" (null without a prediction),
// "max_over_ranks" (with several ranks)}]}
nlohmann::ordered_json MemoryReportJson(const MemoryReport& report);

}  // namespace sluice::train
