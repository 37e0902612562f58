#include "engine/estimate/estimate_compare.h"

#include <fmt/format.h>

#include "runtime/size_format.h"

namespace sluice::estimate {

std::optional<double> PeakRow::deviation() const {
  if (predicted <= 0) return std::nullopt;
  return static_cast<double>(measured) / static_cast<double>(predicted) - 1.0;
}

std::vector<PeakRow> ComparePeaks(const MemoryEstimate& estimate, const MemorySnapshot& snapshot) {
  std::vector<PeakRow> rows;
  for (MemoryTier tier : kAllMemoryTiers) {
    const size_t first = rows.size();
    for (MemoryCategory category : kAllMemoryCategories) {
      PeakRow row{tier, category, estimate.bytes(tier, category),
                  static_cast<int64_t>(snapshot.at(tier, category).peak)};
      if (row.predicted != 0 || row.measured != 0) rows.push_back(row);
    }
    if (rows.size() > first) {
      rows.push_back(PeakRow{tier, std::nullopt, estimate.tier_bytes(tier),
                             static_cast<int64_t>(snapshot.tier(tier).peak)});
    }
  }
  return rows;
}

std::string FormatPeakComparison(const std::vector<PeakRow>& rows) {
  std::string out = fmt::format("  {:<12} {:<12} {:>11} {:>11} {:>10}\n", "tier", "category",
                                "predicted", "measured", "deviation");
  for (const PeakRow& row : rows) {
    const std::optional<double> deviation = row.deviation();
    out += fmt::format("  {:<12} {:<12} {:>11} {:>11} {:>10}\n", MemoryTierName(row.tier),
                       row.category.has_value() ? MemoryCategoryName(*row.category) : "total",
                       FormatBytes(row.predicted), FormatBytes(row.measured),
                       deviation.has_value() ? fmt::format("{:+.1f}%", *deviation * 100.0) : "-");
  }
  return out;
}

nlohmann::json PeakComparisonJson(const std::vector<PeakRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const PeakRow& row : rows) {
    out.push_back(
        {{"tier", std::string(MemoryTierName(row.tier))},
         {"category",
          row.category.has_value() ? std::string(MemoryCategoryName(*row.category)) : "total"},
         {"predicted", row.predicted},
         {"measured", row.measured}});
  }
  return out;
}

}  // namespace sluice::estimate
