#include "engine/zero/offload_ratio.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "engine/zero/offload_options.h"
#include "engine/zero/sharded_adam.h"
#include "engine/zero/split_optimizer.h"
#include "engine/zero/zeroed_buffer.h"
#include "runtime/logging.h"
#include "runtime/size_format.h"

namespace sluice::zero {
namespace {

// A probe of "a few tiles": enough for the offloaded pipeline to fill and drain as it does on
// the shard, and short (tens of milliseconds per step at the default tile).
constexpr int64_t kProbeTiles = 4;
// Below this the timings are mostly call overhead.
constexpr int64_t kMinProbeElements = 1024;
constexpr int kProbeRuns = 3;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Times one warm-up and `runs` steps of `step`; the median seconds.
template <typename StepFn>
Result<double> TimeSteps(int runs, StepFn step) {
  SLUICE_RETURN_IF_ERROR(step());
  std::vector<double> seconds;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    SLUICE_RETURN_IF_ERROR(step());
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return Median(std::move(seconds));
}

double Rate(int64_t elements, double seconds) {
  return seconds > 0 ? static_cast<double>(elements) / seconds : 0.0;
}

// A budget for the log; a negative one (the estimate left nothing) is none.
std::string BudgetText(int64_t bytes) { return FormatBytes(std::max<int64_t>(bytes, 0)); }

}  // namespace

int64_t DeviceElementsForRatio(int64_t count, int64_t tile_elements, double ratio) {
  if (count <= 0 || tile_elements <= 0) return 0;
  const int64_t tiles = (count + tile_elements - 1) / tile_elements;
  const double kept = std::floor((1.0 - ratio) * static_cast<double>(tiles) + 1e-9);
  const int64_t device_tiles = std::clamp<int64_t>(static_cast<int64_t>(kept), 0, tiles);
  return std::min(count, device_tiles * tile_elements);
}

double OffloadedFractionOf(int64_t count, int64_t device_elements) {
  if (count <= 0) return 1.0;
  return static_cast<double>(count - device_elements) / static_cast<double>(count);
}

int64_t DeviceStateBytesPerElement(DType param_dtype) {
  return param_dtype == DType::kF32 ? 8 : 12;
}

int64_t DeviceElementsWithinBudget(int64_t budget_bytes, DType param_dtype, int64_t count,
                                   int64_t tile_elements) {
  const int64_t buffers = param_dtype == DType::kF32 ? 2 : 3;
  const int64_t usable = budget_bytes - buffers * static_cast<int64_t>(kDeviceAlignment);
  if (usable <= 0 || count <= 0 || tile_elements <= 0) return 0;
  const int64_t elements = usable / DeviceStateBytesPerElement(param_dtype);
  if (elements >= count) return count;
  return elements / tile_elements * tile_elements;
}

double BalancedDeviceShare(const OptimizerThroughput& t) {
  const double total = t.device_elements_per_s + t.offloaded_elements_per_s;
  return total > 0 ? t.device_elements_per_s / total : 0.0;
}

OffloadRatioChoice ChooseSplit(const OptimizerThroughput& throughput, int64_t count,
                               int64_t tile_elements, int64_t budget_elements) {
  OffloadRatioChoice choice;
  choice.budget_elements = budget_elements;
  choice.measured = throughput;
  choice.balanced_device_share = BalancedDeviceShare(throughput);
  const double target = choice.balanced_device_share * static_cast<double>(count);
  const int64_t tiles = std::llround(target / static_cast<double>(tile_elements));
  const int64_t balanced = std::min(count, tiles * tile_elements);
  choice.device_elements = std::clamp<int64_t>(balanced, 0, budget_elements);
  choice.ratio = OffloadedFractionOf(count, choice.device_elements);
  choice.reason = balanced > budget_elements
                      ? "the balanced share, capped by the device budget"
                      : "the share at which both parts finish together, in whole tiles";
  return choice;
}

Result<OptimizerThroughput> MeasureOptimizerThroughput(ops::OpsBackend& ops,
                                                       const ZeroOptions& options,
                                                       int64_t probe_elements, int runs,
                                                       offload::RankTiers& tiers) {
  Device& device = ops.device();
  if (probe_elements <= 0 || runs < 1) {
    return InvalidArgumentError("optimizer probe of {} elements and {} runs", probe_elements, runs);
  }
  const size_t n = static_cast<size_t>(probe_elements);
  const DType dtype = options.param_dtype;
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device.CreateStream());
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer params,
                          AllocateZeroed(*stream, n * DTypeSize(dtype), MemoryCategory::kBuffers,
                                         "the optimizer probe's parameters"));
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer grads,
                          AllocateZeroed(*stream, n * sizeof(float), MemoryCategory::kBuffers,
                                         "the optimizer probe's gradients"));
  {
    // Small, normal gradients: zeros would let the kernel run on trivially zero moments.
    const std::vector<float> host(n, 1e-3f);
    SLUICE_RETURN_IF_ERROR(
        device.CopyAsync(grads.data(), host.data(), n * sizeof(float), CopyKind::kH2D, *stream));
    SLUICE_RETURN_IF_ERROR(stream->Synchronize());
  }
  const float* grad_data = grads.data_as<float>();
  const double lr = options.optimizer.lr;

  OptimizerThroughput t;
  t.probe_elements = probe_elements;
  t.runs = runs;
  {
    SLUICE_ASSIGN_OR_RETURN(
        std::unique_ptr<ShardedAdam> adam,
        ShardedAdam::Create(ops, *stream, options.optimizer, dtype, params.data(), probe_elements));
    SLUICE_RETURN_IF_ERROR(adam->LoadMasterFromParams(*stream));
    SLUICE_ASSIGN_OR_RETURN(t.device_seconds, TimeSteps(runs, [&]() -> Status {
                              SLUICE_RETURN_IF_ERROR(adam->Step(*stream, grad_data, lr, 1.0));
                              return stream->Synchronize();
                            }));
  }
  {
    Result<OffloadedPart> part =
        CreateOffloadedPart(device, options, {.shard = params.data()}, /*host_gradients=*/false,
                            probe_elements, tiers, "sluice_ratio_probe");
    if (!part.ok()) {
      return Status(part.status()).WithContext("creating the offloaded optimizer probe");
    }
    offload::OffloadedAdam& adam = *part->adam;
    SLUICE_RETURN_IF_ERROR(adam.LoadMasterFromParams());
    SLUICE_ASSIGN_OR_RETURN(t.offloaded_seconds,
                            TimeSteps(runs, [&]() { return adam.Step(grad_data, lr, 1.0); }));
  }
  t.device_elements_per_s = Rate(probe_elements, t.device_seconds);
  t.offloaded_elements_per_s = Rate(probe_elements, t.offloaded_seconds);
  return t;
}

Result<OffloadRatioChoice> ResolveAutoOffloadRatio(ops::OpsBackend& ops, const ZeroOptions& options,
                                                   int64_t count, offload::RankTiers& tiers) {
  Device& device = ops.device();
  const OffloadOptimizerConfig& offload = options.offload_optimizer;
  const DType dtype = options.param_dtype;
  const int64_t tile = OffloadTileElements(options.sub_group_size);
  const uint64_t free_bytes = device.MemoryInfo().free;
  OffloadRatioChoice choice;
  if (offload.auto_state_budget >= 0) {
    choice.budget_bytes = offload.auto_state_budget;
    choice.budget_source = "the device budget left by the memory estimate";
  } else {
    choice.budget_bytes = static_cast<int64_t>(free_bytes / 2);
    choice.budget_source = "half the device memory free at creation (no estimate given)";
  }
  choice.budget_elements = DeviceElementsWithinBudget(choice.budget_bytes, dtype, count, tile);

  // The probe's device parameters, gradients and state come and go before the optimizer is
  // allocated, within the same budget (so the engine's device peak does not grow by it).
  const int64_t probe_bytes_per_element =
      static_cast<int64_t>(DTypeSize(dtype)) + 4 + DeviceStateBytesPerElement(dtype);
  const int64_t room = std::min<int64_t>(choice.budget_bytes, static_cast<int64_t>(free_bytes)) -
                       5 * static_cast<int64_t>(kDeviceAlignment);
  const int64_t probe = std::min({kProbeTiles * tile, count, room / probe_bytes_per_element});
  if (choice.budget_elements == 0 || probe < std::min(kMinProbeElements, count)) {
    choice.device_elements = 0;
    choice.ratio = 1.0;
    choice.reason = count == 0 ? "an empty shard"
                               : "the device budget leaves no room for optimizer state on the "
                                 "device";
  } else {
    Result<OptimizerThroughput> measured =
        MeasureOptimizerThroughput(ops, options, probe, kProbeRuns, tiers);
    if (!measured.ok()) {
      return Status(measured.status())
          .WithContext(
              "measuring optimizer throughput for zero_optimization.offload_optimizer"
              ".ratio \"auto\"");
    }
    OffloadRatioChoice chosen = ChooseSplit(*measured, count, tile, choice.budget_elements);
    chosen.budget_bytes = choice.budget_bytes;
    chosen.budget_source = choice.budget_source;
    choice = std::move(chosen);
  }
  if (choice.measured.has_value()) {
    const OptimizerThroughput& m = *choice.measured;
    SLUICE_LOG(kInfo, "offload",
               "offload_optimizer.ratio auto: device Adam {:.1f} Melem/s, offloaded Adam ({}) "
               "{:.1f} Melem/s (probe of {} elements, median of {} steps) -> balanced device share "
               "{:.3f}; device budget {} ({}) holds {} elements; ratio {:.4f}: elements "
               "[0, {}) of {} on the device ({})",
               m.device_elements_per_s * 1e-6, OffloadDeviceName(offload.device),
               m.offloaded_elements_per_s * 1e-6, m.probe_elements, m.runs,
               choice.balanced_device_share, BudgetText(choice.budget_bytes), choice.budget_source,
               choice.budget_elements, choice.ratio, choice.device_elements, count, choice.reason);
  } else {
    SLUICE_LOG(kInfo, "offload",
               "offload_optimizer.ratio auto: ratio 1 (everything offloaded to {}): {}; device "
               "budget {} ({})",
               OffloadDeviceName(offload.device), choice.reason, BudgetText(choice.budget_bytes),
               choice.budget_source);
  }
  return choice;
}

}  // namespace sluice::zero
