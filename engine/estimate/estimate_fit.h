// Whether an estimate fits the configured budgets, and what to change when it does not.
//
// Budgets: device.memory_limit against one rank's device bytes; device.host_memory_limit
// against the node's host bytes, (data x tensor ranks) x (host pinned + host), since `sluice
// launch` runs every rank on one node; the free space of each NVMe swap directory against the
// node's NVMe bytes. A budget that is not known (no device.memory_limit for cuda, a swap directory
// that does not exist yet) is reported as not checked.
//
// When the device or the host budget is exceeded, FindAlternatives re-estimates the config with
// one change at a time (a higher ZeRO stage, optimizer or parameter offload, a smaller
// micro-batch, activation checkpointing) and lists each with its figures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/memory_estimate.h"
#include "runtime/status.h"

namespace sluice::estimate {

struct BudgetCheck {
  std::string name;              // "device", "host", "nvme"
  int64_t need = 0;              // bytes
  std::optional<int64_t> limit;  // nullopt: not checked
  std::string limit_source;      // "device.memory_limit", "free space of /nvme", or why unknown
  bool fits() const { return !limit.has_value() || need <= *limit; }
};

struct FitReport {
  std::vector<BudgetCheck> checks;  // device, host, then nvme when something goes there
  bool fits() const;
};

FitReport CheckFit(const Config& config, const MemoryEstimate& estimate);

// One configuration change and its estimate.
struct Variant {
  std::string change;  // the settings to change: "zero_optimization.stage: 3"
  Config config;
  EstimateOptions options;
  MemoryEstimate estimate;
  FitReport fit;
};

// Changes that reduce what does not fit (device first, then host), each estimated; empty when
// everything fits.
std::vector<Variant> FindAlternatives(const Config& config, int world_size,
                                      const EstimateOptions& options, const FitReport& fit);

// DeepSpeed's estimate_zero*_model_states_mem_needs, for this model: stages 0-3 without offload,
// then stage 2 and 3 with the optimizer on the CPU, and stage 3 with optimizer and parameters on
// the CPU; everything else as configured.
Result<std::vector<Variant>> CompareStages(const Config& config, int world_size,
                                           const EstimateOptions& options);

}  // namespace sluice::estimate
