#include "benchmarks/lib/step_bench.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/lib/bench_record.h"
#include "engine/train/run_setup.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_features.h"
#include "offload/offloaded_adam.h"
#include "runtime/thread_cpu.h"
#include "runtime/trace.h"

namespace sluice::bench {
namespace {

constexpr size_t kNumPhases = std::size(kStepPhases);
enum PhaseIndex : size_t {
  kForward,
  kBackward,
  kGather,
  kReduce,
  kD2H,
  kH2D,
  kNvmeRead,
  kNvmeWrite,
  kAdam
};

// The comm queue names its operations after the collective (engine/zero/comm_queue.h). Control
// collectives (the gradient norm, a loss mean, agreement checks) carry no payload and are neither.
void AddCommTime(const TraceEvent& event, StepSample& sample) {
  if (event.bytes == 0) return;
  const double seconds = 1e-9 * static_cast<double>(event.duration_ns());
  const std::string_view name = event.name;
  if (name.starts_with("reduce_scatter") || name.starts_with("all_reduce")) {
    sample.phase_s[kReduce] += seconds;
  } else if (name.starts_with("all_gather")) {
    sample.phase_s[kGather] += seconds;
  }
}

nlohmann::json SampleJson(const StepSample& s) {
  nlohmann::json phases = nlohmann::json::object();
  for (size_t p = 0; p < kNumPhases; ++p) phases[kStepPhases[p]] = s.phase_s[p];
  return {{"phases_s", phases},
          {"wall_s", s.wall_s},
          {"overlap_efficiency", s.overlap_efficiency()},
          {"optimizer",
           {{"wall_s", s.optimizer_wall_s},
            {"nvme_s", s.optimizer_nvme_s()},
            {"adam_s", s.optimizer_adam_s()},
            {"ratio", s.optimizer_ratio()},
            {"prefetched_tiles", s.prefetched_tiles},
            {"engine_step_s", s.engine_step_s}}},
          {"param_nvme_read_s", s.param_nvme_read_s},
          {"loss", s.loss}};
}

nlohmann::json CpuJson(const StepCpu& cpu) {
  nlohmann::json threads = nlohmann::json::array();
  for (const ThreadCpuUse& use : cpu.by_thread) {
    threads.push_back({{"name", use.name}, {"threads", use.threads}, {"cpu_s", use.cpu_s}});
  }
  return {{"total_s", cpu.total_s()}, {"by_thread", threads}};
}

double ComputeSeconds(const StepSample& s) { return s.phase_s[kForward] + s.phase_s[kBackward]; }

}  // namespace

double StepCpu::total_s() const {
  double total = 0;
  for (const ThreadCpuUse& use : by_thread) total += use.cpu_s;
  return total;
}

double StepBenchReport::compute_ratio() const {
  const double base = ComputeSeconds(baseline);
  return baseline_measured && base > 0 ? ComputeSeconds(median) / base : 0;
}

double StepSample::overlap_efficiency() const {
  double sum = 0;
  for (double t : phase_s) sum += t;
  return wall_s > 0 ? sum / wall_s : 0;
}
double StepSample::optimizer_nvme_s() const {
  return phase_s[kNvmeRead] - param_nvme_read_s + phase_s[kNvmeWrite];
}
double StepSample::optimizer_adam_s() const { return phase_s[kAdam]; }
double StepSample::optimizer_ratio() const {
  const double bound = std::max(optimizer_nvme_s(), optimizer_adam_s());
  return bound > 0 ? optimizer_wall_s / bound : 0;
}

void AddStepBenchOptions(CLI::App& app, StepBenchOptions& options) {
  app.add_option("--config", options.configs, "Config file (repeatable, layered in order)")
      ->required();
  app.add_option("--set", options.set_overrides, "Override a setting: key=value (repeatable)");
  app.add_option("--steps", options.steps, "Timed optimizer steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "Untimed steps first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", options.json_path, "Write the JSON record here ('-': stdout)");
  app.add_option("--trace", options.trace_path,
                 "Write a Chrome/Perfetto trace of the timed steps here");
  app.add_flag("!--no-baseline", options.baseline,
               "With offload: do not also time the config without it");
}

namespace {

Result<std::unique_ptr<train::Trainer>> QuietTrainer(const StepBenchOptions& options,
                                                     const std::vector<std::string>& extra_sets) {
  ConfigSources sources;
  sources.paths = options.configs;
  sources.set_overrides = options.set_overrides;
  sources.set_overrides.insert(sources.set_overrides.end(), extra_sets.begin(), extra_sets.end());
  SLUICE_ASSIGN_OR_RETURN(Config config, train::LoadTrainConfig(sources));
  train::TrainerOptions trainer_options;
  trainer_options.progress = train::ProgressMode::kOff;
  trainer_options.write_files = false;
  trainer_options.summary_stream = nullptr;
  SLUICE_ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(config, trainer_options));
  if (trainer->world_size() != 1) {
    return UnimplementedError(
        "sluice bench step times one rank; it was started on {} ranks: run it without mpirun",
        trainer->world_size());
  }
  return trainer;
}

struct TimedSteps {
  std::vector<StepSample> samples;
  StepCpu cpu;
};

// --warmup untimed steps, then --steps timed ones with the trace on (its comm lane is recorded
// only while tracing).
Result<TimedSteps> TimeSteps(train::Trainer& trainer, const StepBenchOptions& options,
                             bool keep_trace) {
  for (int i = 0; i < options.warmup; ++i) {
    SLUICE_ASSIGN_OR_RETURN(train::StepMetrics m, trainer.TrainStep());
    (void)m;
  }
  TraceRecorder& trace = TraceRecorder::Global();
  trace.Clear();
  trace.Enable();
  const offload::NvmeParamStore* param_store = trainer.zero().param_store();
  auto param_read_ns = [param_store]() {
    return param_store == nullptr ? int64_t{0} : param_store->stats().read_ns;
  };
  std::vector<StepSample> samples;
  const ThreadCpuSample cpu_before = SampleThreadCpu();
  for (int i = 0; i < options.steps; ++i) {
    const int64_t begin_ns = TraceClockNs();
    const int64_t param_read_begin_ns = param_read_ns();
    Result<train::StepMetrics> m = trainer.TrainStep();
    const int64_t end_ns = TraceClockNs();
    if (!m.ok()) {
      trace.Disable();
      return Status(m.status()).WithContext(fmt::format("timed step {}", i + 1));
    }
    StepSample sample;
    sample.phase_s[kForward] = m->forward_s;
    sample.phase_s[kBackward] = m->backward_s;
    sample.wall_s = m->step_time_s;
    sample.loss = m->loss;
    sample.optimizer_wall_s = m->optimizer_s;
    sample.engine_step_s = m->optimizer_s;
    if (const offload::OffloadStepTimings* t = trainer.optimizer().last_step_timings()) {
      sample.phase_s[kD2H] = t->d2h_wait_s;
      sample.phase_s[kH2D] = t->h2d_wait_s;
      sample.phase_s[kNvmeRead] = t->nvme_read_s();
      sample.phase_s[kNvmeWrite] = t->nvme_write_s();
      sample.phase_s[kAdam] = t->adam_s;
      sample.prefetched_tiles = t->prefetched_tiles;
      sample.optimizer_wall_s = t->wall_s;
    }
    // The gathers' parameter reads (offload_param nvme) are NVMe reads too, outside the step.
    sample.param_nvme_read_s = 1e-9 * static_cast<double>(param_read_ns() - param_read_begin_ns);
    sample.phase_s[kNvmeRead] += sample.param_nvme_read_s;
    for (const TraceEvent& event : trace.Snapshot()) {
      if (event.lane == kTraceLaneComm && event.start_ns >= begin_ns && event.end_ns <= end_ns) {
        AddCommTime(event, sample);
      }
    }
    samples.push_back(sample);
  }
  TimedSteps timed;
  timed.cpu.by_thread = CpuByThreadName(cpu_before, SampleThreadCpu());
  for (ThreadCpuUse& use : timed.cpu.by_thread) use.cpu_s /= options.steps;
  trace.Disable();
  if (keep_trace && !options.trace_path.empty()) {
    SLUICE_RETURN_IF_ERROR(trace.WriteChromeTrace(options.trace_path, /*rank=*/0));
  }
  trace.Clear();
  for (const StepSample& s : samples) {
    if (!std::isfinite(s.loss)) {
      return DataLossError("a timed step's loss is {}: the run diverged, its timings are void",
                           s.loss);
    }
    for (size_t p = 0; p < kNumPhases; ++p) {
      if (!(s.phase_s[p] >= 0)) {
        return InternalError("phase {} of a timed step took {} s: the timings are void",
                             kStepPhases[p], s.phase_s[p]);
      }
    }
  }
  timed.samples = std::move(samples);
  return timed;
}

StepSample MedianSample(const std::vector<StepSample>& samples) {
  auto median_of = [&samples](auto field) {
    std::vector<double> values;
    for (const StepSample& s : samples) values.push_back(field(s));
    return Median(std::move(values));
  };
  StepSample median;
  for (size_t p = 0; p < kNumPhases; ++p) {
    median.phase_s[p] = median_of([p](const StepSample& s) { return s.phase_s[p]; });
  }
  median.wall_s = median_of([](const StepSample& s) { return s.wall_s; });
  median.optimizer_wall_s = median_of([](const StepSample& s) { return s.optimizer_wall_s; });
  median.engine_step_s = median_of([](const StepSample& s) { return s.engine_step_s; });
  median.loss = median_of([](const StepSample& s) { return s.loss; });
  median.prefetched_tiles = static_cast<int64_t>(
      median_of([](const StepSample& s) { return static_cast<double>(s.prefetched_tiles); }));
  median.param_nvme_read_s = median_of([](const StepSample& s) { return s.param_nvme_read_s; });
  return median;
}

}  // namespace

Result<StepBenchReport> RunStepBench(const StepBenchOptions& options) {
  if (options.steps < 1) return InvalidArgumentError("--steps must be >= 1, got {}", options.steps);
  StepBenchReport report;
  {
    SLUICE_ASSIGN_OR_RETURN(auto trainer, QuietTrainer(options, {}));
    report.machine = MachineJson();
    report.config = ConfigRecordJson(trainer->config());
    const zero::ZeroOptions& zero = trainer->zero().options();
    report.nvme_optimizer = zero.offload_optimizer.device == OffloadDevice::kNvme;
    report.offloaded = zero.offload_optimizer.device != OffloadDevice::kNone ||
                       zero.offload_param.device != OffloadDevice::kNone;
    report.settings = {
        {"configs", options.configs},
        {"set", options.set_overrides},
        {"steps", options.steps},
        {"warmup", options.warmup},
        {"model", train::DescribeModel(trainer->model().options())},
        {"parameters", trainer->model().ParameterCount()},
        {"zero_stage", zero.stage},
        {"offload_optimizer", OffloadDeviceName(zero.offload_optimizer.device)},
        {"offload_param", OffloadDeviceName(zero.offload_param.device)},
        {"optimizer_shard_elements", trainer->zero().optimizer().count()},
        {"gradient_accumulation_steps", trainer->config().batch.gradient_accumulation_steps},
        {"micro_batch_per_gpu", trainer->config().batch.micro_batch_per_gpu}};
    SLUICE_ASSIGN_OR_RETURN(TimedSteps timed, TimeSteps(*trainer, options, /*keep_trace=*/true));
    report.samples = std::move(timed.samples);
    report.cpu = std::move(timed.cpu);
  }
  report.median = MedianSample(report.samples);

  if (report.offloaded && !options.baseline) {
    report.baseline_not_measured = "--no-baseline";
  } else if (report.offloaded) {
    // The same run's baseline, after the offloaded trainer is gone: its memory back.
    Result<std::unique_ptr<train::Trainer>> baseline =
        QuietTrainer(options, {"zero_optimization.offload_optimizer.device=none",
                               "zero_optimization.offload_optimizer.ratio=1",
                               "zero_optimization.offload_param.device=none"});
    Result<TimedSteps> timed = baseline.ok() ? TimeSteps(**baseline, options, /*keep_trace=*/false)
                                             : Result<TimedSteps>(baseline.status());
    if (timed.ok()) {
      report.baseline_measured = true;
      report.baseline = MedianSample(timed->samples);
      report.baseline_cpu = std::move(timed->cpu);
    } else {
      report.baseline_not_measured = timed.status().ToString();
    }
  }
  report.machine["load_average_1m_at_end"] = LoadAverage();
  return report;
}

namespace {

// CPU ms per step by thread name, beside the baseline's.
std::string FormatCpuTable(const StepCpu& cpu, const StepCpu* baseline, double wall_s) {
  auto find = [](const StepCpu* in, const std::string& name) -> const ThreadCpuUse* {
    if (in == nullptr) return nullptr;
    for (const ThreadCpuUse& use : in->by_thread) {
      if (use.name == name) return &use;
    }
    return nullptr;
  };
  std::vector<std::string> names;
  for (const ThreadCpuUse& use : cpu.by_thread) names.push_back(use.name);
  if (baseline != nullptr) {
    for (const ThreadCpuUse& use : baseline->by_thread) {
      if (find(&cpu, use.name) == nullptr) names.push_back(use.name);
    }
  }
  auto ms = [](const ThreadCpuUse* use) { return use != nullptr ? 1e3 * use->cpu_s : 0.0; };
  const bool both = baseline != nullptr;
  std::string out = fmt::format("CPU per step by thread (user + system){}\n",
                                both ? ", beside the run without offload" : "");
  out += fmt::format("{:<16} {:>7} {:>10}{}\n", "thread", "threads", "cpu (ms)",
                     both ? "  no offload (ms)" : "");
  for (const std::string& name : names) {
    const ThreadCpuUse* ours = find(&cpu, name);
    out += fmt::format("{:<16} {:>7} {:>10.1f}{}\n", name, ours != nullptr ? ours->threads : 0,
                       ms(ours), both ? fmt::format(" {:>16.1f}", ms(find(baseline, name))) : "");
  }
  out += fmt::format("{:<16} {:>7} {:>10.1f}{} ({:.2f} cores over the wall)\n", "total", "",
                     1e3 * cpu.total_s(),
                     both ? fmt::format(" {:>16.1f}", 1e3 * baseline->total_s()) : "",
                     wall_s > 0 ? cpu.total_s() / wall_s : 0.0);
  return out;
}

}  // namespace

std::string FormatStepBenchTable(const StepBenchReport& report) {
  const StepSample& m = report.median;
  std::string out = fmt::format("sluice bench step: {}, {} timed steps (medians)\n",
                                report.settings["model"].get<std::string>(), report.samples.size());
  out += fmt::format("{:<12} {:>12} {:>8}\n", "phase", "time (ms)", "% wall");
  double sum = 0;
  for (size_t p = 0; p < kNumPhases; ++p) {
    sum += m.phase_s[p];
    out += fmt::format("{:<12} {:>12.3f} {:>7.1f}%\n", kStepPhases[p], 1e3 * m.phase_s[p],
                       m.wall_s > 0 ? 100 * m.phase_s[p] / m.wall_s : 0.0);
  }
  out += fmt::format("{:<12} {:>12.3f}\n", "sum", 1e3 * sum);
  out += fmt::format("{:<12} {:>12.3f}\n", "wall", 1e3 * m.wall_s);
  out += fmt::format("overlap efficiency (sum / wall): {:.3f}\n", m.overlap_efficiency());
  if (m.param_nvme_read_s > 0) {
    out += fmt::format("of nvme_read, parameter reads for the gathers: {:.3f} ms\n",
                       1e3 * m.param_nvme_read_s);
  }
  out += fmt::format(
      "optimizer step: wall {:.3f} ms, NVMe {:.3f} ms, Adam {:.3f} ms, wall / max(NVMe, Adam) = "
      "{:.3f}{}\n",
      1e3 * m.optimizer_wall_s, 1e3 * m.optimizer_nvme_s(), 1e3 * m.optimizer_adam_s(),
      m.optimizer_ratio(), report.nvme_optimizer ? " (target <= 1.2)" : "");
  out += fmt::format("engine step (norm, clip, optimizer, publish): {:.3f} ms\n",
                     1e3 * m.engine_step_s);
  if (report.baseline_measured) {
    out +=
        fmt::format("whole step against no offload (same run): {:.3f} ms / {:.3f} ms = {:.3f}{}\n",
                    1e3 * m.wall_s, 1e3 * report.baseline.wall_s, report.whole_step_ratio(),
                    report.nvme_optimizer ? " (target <= 1.2)" : "");
    out += fmt::format("forward + backward against no offload: {:.3f} ms / {:.3f} ms = {:.3f}\n",
                       1e3 * ComputeSeconds(m), 1e3 * ComputeSeconds(report.baseline),
                       report.compute_ratio());
  } else if (report.offloaded) {
    out += fmt::format("whole step against no offload: not measured ({})\n",
                       report.baseline_not_measured);
  }
  out += FormatCpuTable(report.cpu, report.baseline_measured ? &report.baseline_cpu : nullptr,
                        m.wall_s);
  return out;
}

nlohmann::json StepBenchJson(const StepBenchReport& report) {
  nlohmann::json samples = nlohmann::json::array();
  for (const StepSample& s : report.samples) samples.push_back(SampleJson(s));
  nlohmann::json results = SampleJson(report.median);
  results["samples"] = samples;
  results["cpu_per_step"] = CpuJson(report.cpu);
  results["optimizer_ratio_target"] = report.nvme_optimizer ? nlohmann::json(1.2) : nullptr;
  if (report.baseline_measured) {
    results["whole_step"] = {{"wall_s", report.median.wall_s},
                             {"no_offload_wall_s", report.baseline.wall_s},
                             {"ratio", report.whole_step_ratio()},
                             {"target", report.nvme_optimizer ? nlohmann::json(1.2) : nullptr}};
    results["compute"] = {{"forward_backward_s", ComputeSeconds(report.median)},
                          {"no_offload_forward_backward_s", ComputeSeconds(report.baseline)},
                          {"ratio", report.compute_ratio()}};
    results["no_offload_cpu_per_step"] = CpuJson(report.baseline_cpu);
  } else if (report.offloaded) {
    results["whole_step"] = {{"not_measured", report.baseline_not_measured}};
  }
  return {{"benchmark", "step"},
          {"machine", report.machine},
          {"config", report.config},
          {"settings", report.settings},
          {"results", results},
          {"correctness",
           {{"checked",
             "every timed step's loss is finite and every phase time is >= 0 (the "
             "run fails otherwise)"}}}};
}

Status RunStepBenchCommand(const StepBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(StepBenchReport report, RunStepBench(options));
  return PrintTableAndWriteRecord(FormatStepBenchTable(report), StepBenchJson(report),
                                  options.json_path);
}

}  // namespace sluice::bench
