#include "engine/estimate/budget_guard.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "engine/estimate/estimate_fit.h"
#include "engine/estimate/memory_estimate.h"

namespace sluice::estimate {
namespace {

std::string Bytes(int64_t bytes) {
  return fmt::format("{:.1f} MiB ({} bytes)", static_cast<double>(bytes) / (1 << 20), bytes);
}

// The setting that moves the budget itself, for each tier.
std::string_view BudgetSetting(const BudgetCheck& check) {
  if (check.name == "device") return "device.memory_limit";
  if (check.name == "host") return "device.host_memory_limit";
  return "the free space of zero_optimization.offload_*.nvme_path (or that path)";
}

std::string_view Scope(const BudgetCheck& check) {
  return check.name == "device" ? "per rank" : "on the node";
}

}  // namespace

Status CheckBudgetsBeforeAllocating(const Config& config, int world_size) {
  const EstimateOptions options;
  Result<MemoryEstimate> estimate = EstimateMemory(config, world_size, options);
  if (!estimate.ok()) {
    return Status(estimate.status()).WithContext("estimating the memory the config needs");
  }
  const FitReport fit = CheckFit(config, *estimate);
  if (fit.fits()) return OkStatus();
  std::vector<std::string> over;
  for (const BudgetCheck& check : fit.checks) {
    if (check.fits()) continue;
    over.push_back(
        fmt::format("the {} budget is exceeded: {} needed {}, {} available ({}); "
                    "raise {}",
                    check.name, Bytes(check.need), Scope(check), Bytes(*check.limit),
                    check.limit_source, BudgetSetting(check)));
  }
  std::vector<std::string> fixes;
  for (const Variant& variant : FindAlternatives(config, world_size, options, fit)) {
    if (variant.fit.fits()) fixes.push_back(variant.change);
  }
  const std::string ranks =
      estimate->tensor_parallel > 1
          ? fmt::format(
                "{} data-parallel x {} tensor-parallel rank(s), each holding its tensor "
                "rank's pieces",
                world_size, estimate->tensor_parallel)
          : fmt::format("{} rank(s)", world_size);
  std::string message =
      fmt::format("the configuration cannot fit ({}): {}", ranks, fmt::join(over, "; "));
  if (!fixes.empty()) {
    message += fmt::format("; or change one of the settings that make it fit: {}",
                           fmt::join(fixes, " | "));
  }
  message += " (sluice estimate --config FILE shows the breakdown)";
  return ResourceExhaustedError("{}", message);
}

}  // namespace sluice::estimate
