// Partial optimizer offload, zero_optimization.offload_optimizer.ratio (DeepSpeed's "Twin-Flow"):
// which part of a rank's shard keeps its optimizer state on the device, and how ratio "auto"
// chooses it.
//
// The ratio is the fraction OFFLOADED, as in DeepSpeed (stage3.py): with the shard cut into
// N = ceil(count / tile) offload tiles (sub_group_size), tiles from floor((1 - ratio) x N) on go
// to the offloaded optimizer and the first ones stay on the device. So ratio 1 offloads
// everything, ratio 0 nothing, and the split always falls on a tile boundary.
//
// "auto" measures instead of guessing: on a scratch probe of a few tiles it times real steps of
// the device optimizer (ShardedAdam) and of the offloaded one (OffloadedAdam, with its
// device-to-host gradient copies, host-to-device parameter copies and, on nvme, the NVMe reads and
// writes), takes the device share f = Td / (Td + To) of the two throughputs (elements/s) at which
// the two parts, stepped at the same time, finish together, caps it by the device budget left for
// optimizer state, and rounds it to whole tiles.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/zero/zero_options.h"
#include "offload/rank_tiers.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// Elements of a `count`-element shard that stay on the device at `ratio` (the first ones), by
// DeepSpeed's rule above: a whole number of tiles, or `count`. A tiny tolerance keeps
// (1 - 0.9) x 10 from flooring to 0.
int64_t DeviceElementsForRatio(int64_t count, int64_t tile_elements, double ratio);

// The offloaded fraction of a split that keeps `device_elements` on the device (1 for an empty
// shard): what a chosen split reports as its ratio.
double OffloadedFractionOf(int64_t count, int64_t device_elements);

// Device bytes per element of the device part's state: exp_avg and exp_avg_sq, plus the fp32
// master weights unless the parameters are fp32 (then the parameter shard is the master).
int64_t DeviceStateBytesPerElement(DType param_dtype);

// The most elements, whole tiles or all `count`, whose device state fits in `budget_bytes`
// (counting the device's allocation alignment of each of its buffers). 0 for a negative budget.
int64_t DeviceElementsWithinBudget(int64_t budget_bytes, DType param_dtype, int64_t count,
                                   int64_t tile_elements);

// The measured throughput of the two optimizers over the same scratch probe.
struct OptimizerThroughput {
  int64_t probe_elements = 0;
  int runs = 0;  // timed steps of each (after one warm-up step); the medians count
  double device_seconds = 0;
  double offloaded_seconds = 0;
  double device_elements_per_s = 0;
  double offloaded_elements_per_s = 0;
};

// The device share that balances two parts stepped at the same time: f = Td / (Td + To).
double BalancedDeviceShare(const OptimizerThroughput& throughput);

// What "auto" chose, and from what.
struct OffloadRatioChoice {
  double ratio = 1.0;                           // the offloaded fraction of the split
  int64_t device_elements = 0;                  // the first elements of the shard, on the device
  double balanced_device_share = 0;             // f, before the cap and the rounding to tiles
  int64_t budget_bytes = 0;                     // device bytes the device part's state may take
  std::string budget_source;                    // "offload_optimizer.auto_state_budget", ...
  int64_t budget_elements = 0;                  // the cap in elements (DeviceElementsWithinBudget)
  std::optional<OptimizerThroughput> measured;  // absent when the probe did not fit
  std::string reason;                           // why this split, for the log
};

// The split from measured throughput and the cap: the balanced share of `count` rounded to the
// nearest whole tile, at most `budget_elements`.
OffloadRatioChoice ChooseSplit(const OptimizerThroughput& throughput, int64_t count,
                               int64_t tile_elements, int64_t budget_elements);

// Times `runs` steps (after a warm-up step) of ShardedAdam and of OffloadedAdam, configured as
// `options` configures the split's parts, over `probe_elements` scratch elements (device
// parameters and gradients, host or NVMe state: an NVMe probe file beside the optimizer's own in
// offload_optimizer.nvme_path, removed afterwards). Everything is freed before it returns.
Result<OptimizerThroughput> MeasureOptimizerThroughput(ops::OpsBackend& ops,
                                                       const ZeroOptions& options,
                                                       int64_t probe_elements, int runs,
                                                       offload::RankTiers& tiers);

// ratio "auto" for a shard of `count` elements on `tiers`' rank: the budget (auto_state_budget, or
// half the device memory free now), the probe (at most 4 tiles, the shard, and what the budget and
// the free memory allow), the split; logs the figures and the choice.
Result<OffloadRatioChoice> ResolveAutoOffloadRatio(ops::OpsBackend& ops, const ZeroOptions& options,
                                                   int64_t count, offload::RankTiers& tiers);

}  // namespace sluice::zero
