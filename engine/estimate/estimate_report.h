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
  int pipeline_stages = 1;  // of the grid the headline shows (the estimate is one stage's)
  MemoryEstimate estimate;
  FitReport fit;
  std::vector<Variant> alternatives;  // when something does not fit
  std::vector<Variant> stages;        // CompareStages
};

// Headline (the grid: data x tensor x pipeline ranks, whose one rank the figures are), the tier x
// category table with totals, the line items with their formulas, the
// budgets, the alternatives and the comparison of stages.
std::string FormatEstimateText(const EstimateReport& report);

// {"schema": "sluice.memory_estimate/1", "model": {...}, "settings": {...}, "grid": {"data": D,
// "tensor": T, "pipeline": P, "world": D x T x P, "sequence_parallel": b, "vocab_parallel": b,
// "tensor_rank_parameters": Ψ of the rank}, "per_rank": {tier:
// {"total": b, "categories": {category: b}}}, "items": [...], "budgets": [...], "fits": bool,
// "alternatives": [...], "stages": [...], "notes": [...]}; all sizes in bytes.
nlohmann::ordered_json EstimateJson(const EstimateReport& report);

// The tier x category table alone (also used by the peak comparison).
std::string FormatTierTable(const MemoryEstimate& estimate);

}  // namespace sluice::estimate
