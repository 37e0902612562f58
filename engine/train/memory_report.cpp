#include "engine/train/memory_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/estimate/memory_estimate.h"
#include "engine/estimate/pipeline_estimate.h"
#include "engine/parallel/process_grid.h"
#include "engine/train/train_world.h"
#include "runtime/size_format.h"

namespace sluice::train {
namespace {

// The snapshot's peaks as words, every (tier, category) then every tier's total.
std::vector<uint64_t> PeakWords(const MemorySnapshot& snapshot) {
  std::vector<uint64_t> words;
  for (MemoryTier tier : kAllMemoryTiers) {
    for (MemoryCategory category : kAllMemoryCategories) {
      words.push_back(snapshot.at(tier, category).peak);
    }
  }
  for (MemoryTier tier : kAllMemoryTiers) words.push_back(snapshot.tier(tier).peak);
  return words;
}

std::optional<double> Ratio(const estimate::PeakRow& row) {
  if (row.predicted <= 0) return std::nullopt;
  return static_cast<double>(row.measured) / static_cast<double>(row.predicted);
}

}  // namespace

void MergePeaks(MemorySnapshot& into, const MemorySnapshot& now) {
  for (int t = 0; t < kNumMemoryTiers; ++t) {
    into.by_tier[t].peak = std::max(into.by_tier[t].peak, now.by_tier[t].peak);
    into.by_tier[t].current = now.by_tier[t].current;
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      MemoryUsage& usage = into.by_tier_category[t][c];
      usage.peak = std::max(usage.peak, now.by_tier_category[t][c].peak);
      usage.current = now.by_tier_category[t][c].current;
    }
  }
}

// The estimate of this rank's share: its data-parallel group's, and with pipeline stages its
// stage's under the config's schedule (pipeline_estimate.h).
Result<estimate::MemoryEstimate> PredictedPeaks(const Config& config, Comm& world) {
  const int data_parallel = std::max(1, config.dp_world_size);
  if (config.parallel.pipeline <= 1) return estimate::EstimateMemory(config, data_parallel);
  SLUICE_ASSIGN_OR_RETURN(const estimate::PipelineEstimateOptions options,
                          estimate::PipelineOptionsOf(config));
  SLUICE_ASSIGN_OR_RETURN(estimate::PipelineEstimate pipeline,
                          estimate::EstimatePipeline(config, data_parallel, options));
  SLUICE_ASSIGN_OR_RETURN(const parallel::ProcessGrid grid,
                          parallel::ProcessGrid::Create(world.size(), config.parallel.tensor,
                                                        config.parallel.pipeline));
  const int stage = grid.CoordsOf(world.rank()).pipeline;
  return std::move(pipeline.stages[static_cast<size_t>(stage)].estimate);
}

Result<MemoryReport> BuildMemoryReport(const Config& config, Comm& world,
                                       const MemorySnapshot& run_peaks) {
  MemoryReport report;
  report.rank = world.rank();
  report.world_size = world.size();
  report.stage = config.zero.stage;
  estimate::MemoryEstimate predicted;  // empty: nothing predicted
  Result<estimate::MemoryEstimate> estimated = PredictedPeaks(config, world);
  if (estimated.ok()) {
    predicted = std::move(estimated).value();
  } else {
    report.estimate_error = estimated.status().ToString();
  }
  const std::vector<uint64_t> mine = PeakWords(run_peaks);
  std::vector<uint64_t> max = mine;
  if (world.size() > 1) {
    Result<std::vector<uint64_t>> reduced = MaxAcrossRanks(world, mine);
    if (!reduced.ok()) {
      return Status(reduced.status()).WithContext("taking the largest memory peaks over the ranks");
    }
    max = std::move(reduced).value();
  }
  size_t word = 0;
  for (MemoryTier tier : kAllMemoryTiers) {
    const size_t first = report.rows.size();
    for (MemoryCategory category : kAllMemoryCategories) {
      const estimate::PeakRow row{tier, category, predicted.bytes(tier, category),
                                  static_cast<int64_t>(mine[word])};
      const uint64_t largest = max[word++];
      if (row.predicted == 0 && largest == 0) continue;
      report.rows.push_back(row);
      report.max_over_ranks.push_back(static_cast<int64_t>(largest));
    }
    const size_t total_word = kNumMemoryTiers * kNumMemoryCategories + static_cast<size_t>(tier);
    if (report.rows.size() > first) {
      report.rows.push_back(estimate::PeakRow{tier, std::nullopt, predicted.tier_bytes(tier),
                                              static_cast<int64_t>(mine[total_word])});
      report.max_over_ranks.push_back(static_cast<int64_t>(max[total_word]));
    }
  }
  if (world.size() == 1) report.max_over_ranks.clear();
  return report;
}

std::string FormatMemoryReport(const MemoryReport& r) {
  const bool ranks = r.world_size > 1;
  std::string out = fmt::format(
      "memory: peak of {} against `sluice estimate` (stage {}, {} rank{})\n",
      ranks ? fmt::format("rank {} of {}", r.rank, r.world_size) : std::string("the run"), r.stage,
      r.world_size, r.world_size == 1 ? "" : "s");
  if (!r.estimate_error.empty()) out += fmt::format("  no prediction: {}\n", r.estimate_error);
  std::string header = fmt::format("  {:<12} {:<11} {:>11} {:>11} {:>7}", "tier", "category",
                                   "predicted", "measured", "ratio");
  if (ranks) header += fmt::format(" {:>15}", fmt::format("max of {} ranks", r.world_size));
  out += header + "\n";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const estimate::PeakRow& row = r.rows[i];
    const std::optional<double> ratio = Ratio(row);
    std::string line = fmt::format(
        "  {:<12} {:<11} {:>11} {:>11} {:>7}", MemoryTierName(row.tier),
        row.category.has_value() ? MemoryCategoryName(*row.category) : "total",
        row.predicted > 0 ? FormatBytes(static_cast<uint64_t>(row.predicted)) : std::string("-"),
        FormatBytes(static_cast<uint64_t>(row.measured)),
        ratio.has_value() ? fmt::format("{:.3f}", *ratio) : std::string("-"));
    if (ranks)
      line += fmt::format(" {:>15}", FormatBytes(static_cast<uint64_t>(r.max_over_ranks[i])));
    out += line + "\n";
  }
  return out;
}

nlohmann::ordered_json MemoryReportJson(const MemoryReport& r) {
  nlohmann::ordered_json json;
  json["rank"] = r.rank;
  json["world_size"] = r.world_size;
  json["stage"] = r.stage;
  json["estimate_error"] = r.estimate_error.empty() ? nlohmann::ordered_json(nullptr)
                                                    : nlohmann::ordered_json(r.estimate_error);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const estimate::PeakRow& row = r.rows[i];
    nlohmann::ordered_json item;
    item["tier"] = std::string(MemoryTierName(row.tier));
    item["category"] =
        row.category.has_value() ? std::string(MemoryCategoryName(*row.category)) : "total";
    item["predicted"] = row.predicted;
    item["measured"] = row.measured;
    const std::optional<double> ratio = Ratio(row);
    item["ratio"] =
        ratio.has_value() ? nlohmann::ordered_json(*ratio) : nlohmann::ordered_json(nullptr);
    if (r.world_size > 1) item["max_over_ranks"] = r.max_over_ranks[i];
    rows.push_back(std::move(item));
  }
  json["rows"] = std::move(rows);
  return json;
}

}  // namespace sluice::train
