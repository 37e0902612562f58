// The training-step benchmark (`sluice bench step`, benchmarks/bench_step): runs --steps optimizer
// steps of the configured model through the trainer (engine/train/trainer.h) after --warmup
// untimed ones and reports, per step (medians over the timed steps), the time of each phase:
//
//   forward, backward   the trainer's split of each micro-batch pass (summed over micro-batches)
//   gather, reduce      the comm lane's operations inside the step (runtime/trace.h): parameter
//                       all-gathers with a payload / reduce-scatters and all-reduces of gradients
//   d2h, h2d            the offloaded optimizer's waits for gradient / parameter tiles
//   nvme_read/_write    its tile reads / writes: submission plus exposed wait
//   adam                the fused CPU Adam kernel over all tiles
//
// (the last five from OffloadedAdam::last_step_timings; zero without optimizer offload), the step's
// wall time and the overlap efficiency = (sum of the phase times) / wall: above 1 when phases ran
// concurrently. The same-run baseline is that sum itself, the wall time the step would take with
// every phase serialized. For the optimizer step alone: its wall time, NVMe time (read + write),
// Adam time and issue 7's ratio wall / max(NVMe, Adam) (target <= 1.2 with NVMe optimizer offload).
// With any offload (optimizer state or parameters off the device) the headline is the whole step
// against the same config without offload, timed in the same run after it (--no-baseline skips
// it; a baseline that cannot be built, e.g. one that does not fit device.memory_limit, is
// reported, not fatal): issue 17's target is <= 1.2 with the optimizer on NVMe.
// Where the CPU went: every thread's user + system time over the timed steps, per step, by thread
// name (runtime/thread_cpu.h: stream workers with the OpenMP teams they start, the io_uring
// completion thread, the main thread), for the run and its baseline; and forward + backward
// against the baseline's, which shows what the offload costs the compute.
// Correctness check: every timed step's loss is finite and the phase times are non-negative; the
// run fails otherwise.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/thread_cpu.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct StepBenchOptions {
  std::vector<std::string> configs;        // layered in order
  std::vector<std::string> set_overrides;  // "key=value", applied last
  int steps = 5;
  int warmup = 1;
  std::string json_path;   // "-" for stdout
  std::string trace_path;  // Chrome / Perfetto trace of the timed steps
  bool baseline = true;    // with offload: also time the config without it
};

void AddStepBenchOptions(CLI::App& app, StepBenchOptions& options);

// The phases in report order.
inline constexpr const char* kStepPhases[] = {"forward", "backward",  "gather",     "reduce", "d2h",
                                              "h2d",     "nvme_read", "nvme_write", "adam"};

struct StepSample {
  double phase_s[std::size(kStepPhases)] = {};
  double wall_s = 0;
  double optimizer_wall_s = 0;  // OffloadedAdam's step, or the engine's whole Step without offload
  // The engine's whole Step: the gradient norm, clipping and publishing the parameters too.
  double engine_step_s = 0;
  double loss = 0;
  // Optimizer tiles whose state the engine began reading while the passes computed
  // (OffloadedAdam::PrefetchState).
  int64_t prefetched_tiles = 0;
  // offload_param nvme: the parameter reads of the passes' gathers (part of nvme_read, not of
  // the optimizer step).
  double param_nvme_read_s = 0;
  double overlap_efficiency() const;  // sum(phase_s) / wall_s
  // The optimizer step's NVMe time: nvme_read (less the gathers' parameter reads) + nvme_write.
  double optimizer_nvme_s() const;
  double optimizer_adam_s() const;
  double optimizer_ratio() const;  // optimizer_wall_s / max(nvme, adam); 0 when both are 0
};

// The CPU time per step of each thread name over the timed steps, largest first.
struct StepCpu {
  std::vector<ThreadCpuUse> by_thread;  // cpu_s per step
  double total_s() const;
};

struct StepBenchReport {
  nlohmann::json machine;
  nlohmann::json config;    // the resolved config record
  nlohmann::json settings;  // steps, warmup, config paths, overrides, model, offload tiers
  std::vector<StepSample> samples;
  StepSample median;  // per field median over the samples (efficiency and ratio recomputed)
  StepCpu cpu;
  bool nvme_optimizer = false;
  bool offloaded = false;  // optimizer state or parameters off the device
  // The same config without offload, timed after it (offloaded runs only).
  bool baseline_measured = false;
  StepSample baseline;  // its medians
  StepCpu baseline_cpu;
  std::string baseline_not_measured;  // why, when offloaded and not measured
  // The headline: median step / the baseline's median step (0 without a baseline).
  double whole_step_ratio() const {
    return baseline_measured && baseline.wall_s > 0 ? median.wall_s / baseline.wall_s : 0;
  }
  // Median forward + backward against the baseline's (0 without a baseline).
  double compute_ratio() const;
};

Result<StepBenchReport> RunStepBench(const StepBenchOptions& options);
std::string FormatStepBenchTable(const StepBenchReport& report);
nlohmann::json StepBenchJson(const StepBenchReport& report);

// Runs, prints the table, writes --json and --trace if asked.
Status RunStepBenchCommand(const StepBenchOptions& options);

}  // namespace sluice::bench
