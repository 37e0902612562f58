// The human table and the JSON record of `sluice estimate`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/estimate_fit.h"
#include "engine/estimate/memory_estimate.h"

namespace sluice::estimate {

struct EstimateReport {
  const Config* config = nullptr;
  MemoryEstimate estimate;
  FitReport fit;
  std::vector<Variant> alternatives;  // when something does not fit
  std::vector<Variant> stages;        // CompareStages
};

// Headline, the tier x category table with totals, the line items with their formulas, the
// budgets, the alternatives and the comparison of stages.
std::string FormatEstimateText(const EstimateReport& report);

// {"schema": "sluice.memory_estimate/1", "model": {...}, "settings": {...}, "per_rank": {tier:
// {"total": b, "categories": {category: b}}}, "items": [...], "budgets": [...], "fits": bool,
// "alternatives": [...], "stages": [...], "notes": [...]}; all sizes in bytes.
nlohmann::ordered_json EstimateJson(const EstimateReport& report);

// The tier x category table alone (also used by the peak comparison).
std::string FormatTierTable(const MemoryEstimate& estimate);

}  // namespace sluice::estimate
