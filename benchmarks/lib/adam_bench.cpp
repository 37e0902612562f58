#include "benchmarks/lib/adam_bench.h"

#include <hwloc.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <utility>

#include "benchmarks/lib/bench_record.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/adam_ref.h"
#include "kernels/ref/half.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::bench {
namespace {

using kernels::AdamCopyType;
using kernels::AdamGradType;
using kernels::AdamHyperparams;
using kernels::AdamTensors;
using kernels::AdamThreading;

constexpr double kCheckTolerance = 1e-6;  // relative, fp32, as the kernel tests declare
constexpr double kTargetFraction = 0.9;
constexpr size_t kCheckWindow = 4099;  // odd, so windows end in every variant's scalar tail
constexpr float kGradScale = 0.5f;

struct ModeSpec {
  char name;
  AdamGradType grad_type;
  AdamCopyType copy_type;
  const char* description;
};

constexpr ModeSpec kModes[] = {
    {'a', AdamGradType::kF32, AdamCopyType::kNone, "fp32 grads, no copy"},
    {'b', AdamGradType::kF32, AdamCopyType::kBF16, "fp32 grads + bf16 copy"},
    {'c', AdamGradType::kBF16, AdamCopyType::kBF16, "bf16 grads + bf16 copy"},
};

const ModeSpec& Mode(char name) { return kModes[name - 'a']; }

// Each parameter's DRAM traffic when every byte moves once: read p, m, v and the gradient;
// write p, m, v and the copy (non-temporal, so no read-for-ownership).
double BytesPerParam(const ModeSpec& mode) {
  return 4.0 * 3 * 2 + kernels::AdamGradTypeSize(mode.grad_type) +
         kernels::AdamCopyTypeSize(mode.copy_type);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<void, FreeDeleter>;

Result<Buffer> Allocate(size_t bytes, const char* what) {
  size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, std::max<size_t>(rounded, 4096));
  if (p == nullptr) {
    return ResourceExhaustedError("allocating {} bytes for {}: out of memory; pick smaller --sizes",
                                  bytes, what);
  }
  return Buffer(p);
}

Result<size_t> ParseSize(const std::string& text) {
  char* end = nullptr;
  if (text.rfind("2^", 0) == 0) {
    long k = std::strtol(text.c_str() + 2, &end, 10);
    if (*end == '\0' && end != text.c_str() + 2 && k >= 0 && k <= 40) return size_t{1} << k;
  } else {
    unsigned long long n = std::strtoull(text.c_str(), &end, 10);
    if (*end == '\0' && end != text.c_str() && n > 0) return static_cast<size_t>(n);
  }
  return InvalidArgumentError("--sizes: '{}' is neither 2^k (k <= 40) nor a positive count", text);
}

Result<std::vector<int>> ParseThreads(const std::vector<std::string>& specs, int cores) {
  std::vector<int> threads;
  if (specs.empty()) {
    for (int t = 1; t < cores; t *= 2) threads.push_back(t);
    threads.push_back(cores);
    return threads;
  }
  for (const std::string& spec : specs) {
    int first = 0, last = 0;
    char tail = 0;
    int fields = std::sscanf(spec.c_str(), "%d-%d%c", &first, &last, &tail);
    if (fields == 1) last = first;
    if ((fields != 1 && fields != 2) || first < 1 || last < first) {
      return InvalidArgumentError("--threads: '{}' is not a count N >= 1 or a range N-M", spec);
    }
    for (int t = first; t <= last; ++t) threads.push_back(t);
  }
  return threads;
}

AdamBenchFigure MakeFigure(std::vector<double> samples, size_t size, double bytes_per_param) {
  AdamBenchFigure figure;
  figure.median_seconds = Median(samples);
  figure.gparams_per_second = static_cast<double>(size) / figure.median_seconds * 1e-9;
  figure.gbytes_per_second = figure.gparams_per_second * bytes_per_param;
  figure.samples_seconds = std::move(samples);
  return figure;
}

// The optimizer state of one size; every mode runs on it.
class AdamBenchState {
 public:
  static Result<AdamBenchState> Create(size_t n) {
    AdamBenchState state;
    state.n_ = n;
    SLUICE_ASSIGN_OR_RETURN(state.params_, Allocate(4 * n, "params"));
    SLUICE_ASSIGN_OR_RETURN(state.exp_avg_, Allocate(4 * n, "exp_avg"));
    SLUICE_ASSIGN_OR_RETURN(state.exp_avg_sq_, Allocate(4 * n, "exp_avg_sq"));
    SLUICE_ASSIGN_OR_RETURN(state.grads_f32_, Allocate(4 * n, "fp32 grads"));
    SLUICE_ASSIGN_OR_RETURN(state.grads_bf16_, Allocate(2 * n, "bf16 grads"));
    SLUICE_ASSIGN_OR_RETURN(state.copy_, Allocate(2 * n, "bf16 copy"));
    return state;
  }

  // Fills every buffer on the threads that will use it (first touch places the pages).
  void Initialize(const AdamThreading& threading) {
    AdamTensors t = Tensors(Mode('c'));
    float* g32 = static_cast<float*>(grads_f32_.get());
    uint16_t* g16 = static_cast<uint16_t*>(grads_bf16_.get());
    uint16_t* copy = static_cast<uint16_t*>(copy_.get());
    kernels::ForEachAdamRange(n_, t.params, threading, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        // Deterministic values in [-1, 1) (a multiplicative hash), not a RNG: cheap at 2^27.
        float u = static_cast<float>((i * 2654435761u) & 0xffffffu) * 0x1p-23f - 1.0f;
        t.params[i] = u;
        t.exp_avg[i] = 0.0f;
        t.exp_avg_sq[i] = 0.0f;
        g32[i] = 0.01f * u * u * u;
        g16[i] = kernels::F32ToBf16(g32[i]);
        copy[i] = 0;
      }
    });
  }

  AdamTensors Tensors(const ModeSpec& mode) const {
    AdamTensors t;
    t.params = static_cast<float*>(params_.get());
    t.exp_avg = static_cast<float*>(exp_avg_.get());
    t.exp_avg_sq = static_cast<float*>(exp_avg_sq_.get());
    t.grad_type = mode.grad_type;
    t.grads = mode.grad_type == AdamGradType::kF32 ? grads_f32_.get() : grads_bf16_.get();
    t.copy_type = mode.copy_type;
    t.param_copy = mode.copy_type == AdamCopyType::kNone ? nullptr : copy_.get();
    t.count = n_;
    return t;
  }

 private:
  size_t n_ = 0;
  Buffer params_, exp_avg_, exp_avg_sq_, grads_f32_, grads_bf16_, copy_;
};

// A private copy of elements [begin, begin + count) of `t`, for the reference to update.
struct Window {
  Window(const AdamTensors& t, size_t begin, size_t count)
      : begin(begin),
        params(t.params + begin, t.params + begin + count),
        exp_avg(t.exp_avg + begin, t.exp_avg + begin + count),
        exp_avg_sq(t.exp_avg_sq + begin, t.exp_avg_sq + begin + count),
        grads(static_cast<const char*>(t.grads) + begin * kernels::AdamGradTypeSize(t.grad_type),
              static_cast<const char*>(t.grads) +
                  (begin + count) * kernels::AdamGradTypeSize(t.grad_type)),
        copy(count, 0),
        tensors{params.data(),     exp_avg.data(),
                exp_avg_sq.data(), grads.data(),
                t.grad_type,       t.copy_type == AdamCopyType::kNone ? nullptr : copy.data(),
                t.copy_type,       count} {}

  size_t begin;
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::vector<char> grads;
  std::vector<uint16_t> copy;
  AdamTensors tensors;
};

struct CheckResult {
  double max_relative_error = 0;
  size_t copy_mismatches = 0;
};

// One full AdamStep, with the reference run on three windows (start, middle, end) of the same
// inputs; compares the results.
CheckResult CheckAgainstReference(const AdamTensors& t, const AdamHyperparams& hyper,
                                  const AdamThreading& threading) {
  size_t w = std::min(t.count, kCheckWindow);
  std::vector<Window> windows;
  for (size_t begin : {size_t{0}, (t.count - w) / 2, t.count - w})
    windows.emplace_back(t, begin, w);
  kernels::AdamStep(t, hyper, kGradScale, threading);
  CheckResult result;
  auto relative = [](float got, float want) {
    if (got == want) return 0.0;
    if (std::isnan(got) || std::isnan(want)) return HUGE_VAL;
    return std::fabs(double{got} - want) / std::max(std::fabs(got), std::fabs(want));
  };
  for (Window& window : windows) {
    kernels::AdamStepReference(window.tensors, hyper, kGradScale);
    for (size_t i = 0; i < w; ++i) {
      size_t at = window.begin + i;
      result.max_relative_error =
          std::max({result.max_relative_error, relative(t.params[at], window.params[i]),
                    relative(t.exp_avg[at], window.exp_avg[i]),
                    relative(t.exp_avg_sq[at], window.exp_avg_sq[i])});
      if (t.copy_type != AdamCopyType::kNone &&
          static_cast<const uint16_t*>(t.param_copy)[at] != window.copy[i]) {
        ++result.copy_mismatches;
      }
    }
  }
  return result;
}

// Seconds per call of one mode, one entry per timed repeat.
struct Samples {
  std::vector<double> probe, kernel, baseline;
};

AdamBenchRow MakeRow(size_t n, int threads, char mode_name, const Samples& samples,
                     const CheckResult& check) {
  AdamBenchRow row;
  row.size = n;
  row.threads = threads;
  row.mode = mode_name;
  row.bytes_per_param = BytesPerParam(Mode(mode_name));
  row.kernel = MakeFigure(samples.kernel, n, row.bytes_per_param);
  row.roofline = MakeFigure(samples.probe, n, row.bytes_per_param);
  row.baseline = MakeFigure(samples.baseline, n, row.bytes_per_param);
  row.roofline_fraction = MedianRatio(samples.probe, samples.kernel);
  row.speedup = MedianRatio(samples.baseline, samples.kernel);
  row.check_max_relative_error = check.max_relative_error;
  row.check_copy_mismatches = check.copy_mismatches;
  row.check_passed = check.max_relative_error <= kCheckTolerance && check.copy_mismatches == 0;
  return row;
}

std::string SizeLabel(size_t n) {
  if (n != 0 && (n & (n - 1)) == 0) return fmt::format("2^{}", std::countr_zero(n));
  return std::to_string(n);
}

nlohmann::json FigureJson(const AdamBenchFigure& f) {
  return {{"median_seconds", f.median_seconds},
          {"gparams_per_second", f.gparams_per_second},
          {"gbytes_per_second", f.gbytes_per_second},
          {"samples_seconds", f.samples_seconds}};
}

// The target at the largest size and thread count measured: every mode at >= 90% of
// the roofline, and mode (c) at least as many Gparam/s as mode (a).
nlohmann::json EvaluateTarget(const std::vector<AdamBenchRow>& rows) {
  if (rows.empty()) return nullptr;
  size_t size = 0;
  int threads = 0;
  for (const AdamBenchRow& r : rows) size = std::max(size, r.size);
  for (const AdamBenchRow& r : rows) {
    if (r.size == size) threads = std::max(threads, r.threads);
  }
  nlohmann::json fractions = nlohmann::json::object();
  bool all_at_roofline = true;
  const AdamBenchRow* mode_a = nullptr;
  const AdamBenchRow* mode_c = nullptr;
  for (const AdamBenchRow& r : rows) {
    if (r.size != size || r.threads != threads) continue;
    fractions[std::string(1, r.mode)] = r.roofline_fraction;
    all_at_roofline = all_at_roofline && r.roofline_fraction >= kTargetFraction;
    if (r.mode == 'a') mode_a = &r;
    if (r.mode == 'c') mode_c = &r;
  }
  nlohmann::json target = {{"size", size},
                           {"threads", threads},
                           {"required_roofline_fraction", kTargetFraction},
                           {"roofline_fractions", fractions},
                           {"all_modes_at_roofline", all_at_roofline}};
  if (mode_a != nullptr && mode_c != nullptr) {
    // Mode c's rate over mode a's, paired by repeat (same parameter count, so a time ratio).
    double c_over_a = MedianRatio(mode_a->kernel.samples_seconds, mode_c->kernel.samples_seconds);
    target["mode_c_over_mode_a"] = c_over_a;
    target["met"] = all_at_roofline && c_over_a >= 1.0;
  } else {
    target["met"] = nullptr;  // modes a and c were not both measured
  }
  return target;
}

}  // namespace

void AddAdamBenchOptions(CLI::App& app, AdamBenchOptions& options) {
  app.add_option("--sizes", options.sizes,
                 "Parameter counts: 2^k or a number (default 2^20 2^24 2^27)")
      ->delimiter(',');
  app.add_option("--threads", options.threads,
                 "Thread counts or ranges, e.g. 1-16 (default 1, 2, 4, ... and all cores)")
      ->delimiter(',');
  app.add_option("--modes", options.modes,
                 "Any of a (fp32 grads, no copy), b (fp32 grads + bf16 copy), "
                 "c (bf16 grads + bf16 copy)")
      ->capture_default_str();
  app.add_option("--repeats", options.repeats, "Timed steps per figure (median reported), >= 5")
      ->capture_default_str();
  app.add_option("--warmup", options.warmup, "Untimed steps before timing")->capture_default_str();
  app.add_option("--isa", options.isa, "Cap the kernel's ISA: scalar, avx2 or avx512");
  app.add_option("--cpuset", options.cpuset,
                 "Bind thread i to the i-th CPU of this hwloc list, e.g. 0-15");
  app.add_option("--json", options.json_path, "Also write the record as JSON here ('-': stdout)");
}

namespace {

// The options, checked and parsed.
struct AdamBenchPlan {
  std::vector<size_t> sizes;
  std::vector<int> threads;
  std::string modes;  // distinct letters among a, b, c
  std::unique_ptr<hwloc_bitmap_s, decltype(&hwloc_bitmap_free)> cpuset{nullptr, hwloc_bitmap_free};
  std::optional<kernels::Isa> isa;
};

Result<AdamBenchPlan> MakePlan(const AdamBenchOptions& options) {
  AdamBenchPlan plan;
  for (const std::string& text : options.sizes) {
    SLUICE_ASSIGN_OR_RETURN(size_t n, ParseSize(text));
    plan.sizes.push_back(n);
  }
  if (plan.sizes.empty()) return InvalidArgumentError("--sizes: give at least one size");
  SLUICE_ASSIGN_OR_RETURN(plan.threads, ParseThreads(options.threads, omp_get_num_procs()));
  for (char c : options.modes) {
    if (c == ',' || c == ' ') continue;
    if (c < 'a' || c > 'c') {
      return InvalidArgumentError("--modes: '{}' is not a, b or c", std::string(1, c));
    }
    if (plan.modes.find(c) == std::string::npos) plan.modes += c;
  }
  if (plan.modes.empty()) return InvalidArgumentError("--modes: give at least one of a, b, c");
  if (options.repeats < 5) {
    return InvalidArgumentError("--repeats = {}: figures are medians of at least 5 steps",
                                options.repeats);
  }
  if (options.warmup < 0) return InvalidArgumentError("--warmup = {} must be >= 0", options.warmup);
  if (!options.cpuset.empty()) {
    plan.cpuset.reset(hwloc_bitmap_alloc());
    if (hwloc_bitmap_list_sscanf(plan.cpuset.get(), options.cpuset.c_str()) != 0) {
      return InvalidArgumentError("--cpuset: '{}' is not an hwloc list such as 0-15,32-47",
                                  options.cpuset);
    }
    std::string error = kernels::AdamThreadingError(AdamThreading{.cpuset = plan.cpuset.get()});
    if (!error.empty()) return InvalidArgumentError("--cpuset: {}", error);
  }
  if (!options.isa.empty()) {
    SLUICE_ASSIGN_OR_RETURN(plan.isa, ParseIsaOption(options.isa));
  }
  return plan;
}

// A float setting as the decimal it was written as (0.001, not 0.0010000000474974513).
double Decimal(float value) { return std::stod(fmt::format("{}", value)); }

nlohmann::json SettingsJson(const AdamBenchOptions& options, const AdamBenchPlan& plan,
                            const AdamHyperparams& hyper) {
  std::vector<std::string> sizes, modes;
  for (size_t n : plan.sizes) sizes.push_back(SizeLabel(n));
  for (char mode : plan.modes) modes.push_back(fmt::format("{}: {}", mode, Mode(mode).description));
  return {
      {"isa", std::string(kernels::IsaName(kernels::AdamIsa()))},
      {"sizes", sizes},
      {"threads", plan.threads},
      {"modes", modes},
      {"repeats", options.repeats},
      {"warmup", options.warmup},
      {"cpuset", options.cpuset.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.cpuset)},
      {"tile_elements", kernels::kAdamTileElements},
      {"grad_scale", Decimal(kGradScale)},
      {"hyperparams",
       {{"lr", Decimal(hyper.lr)},
        {"beta1", Decimal(hyper.beta1)},
        {"beta2", Decimal(hyper.beta2)},
        {"eps", Decimal(hyper.eps)},
        {"weight_decay", Decimal(hyper.weight_decay)},
        {"adamw_mode", hyper.adamw_mode}}},
      {"baseline",
       "plain scalar loop (kernels/ref AdamStepReference, not vectorized) on the same threads"},
      {"roofline", "memory probe: the kernel's loads and stores with trivial arithmetic"},
      {"ratios",
       "roofline_fraction, speedup_over_baseline and mode_c_over_mode_a are medians of "
       "per-repeat ratios of neighbouring measurements; rates are from median times"}};
}

// Times every mode at one thread count on `state`, appending one row per mode.
void MeasureThreads(const AdamBenchState& state, size_t n, int threads, const AdamBenchPlan& plan,
                    const AdamBenchOptions& options, const std::vector<CheckResult>& checks,
                    AdamHyperparams& hyper, std::vector<AdamBenchRow>& rows) {
  AdamThreading threading{.num_threads = threads, .cpuset = plan.cpuset.get()};
  auto kernel = [&](const AdamTensors& t) {
    ++hyper.step;
    kernels::AdamStep(t, hyper, kGradScale, threading);
  };
  auto probe = [&](const AdamTensors& t) { kernels::AdamMemoryProbe(t, threading); };
  auto baseline = [&](const AdamTensors& t) {
    ++hyper.step;
    kernels::ForEachAdamRange(n, t.params, threading, [&](size_t begin, size_t end) {
      kernels::AdamStepReference(kernels::SliceAdamTensors(t, begin, end - begin), hyper,
                                 kGradScale);
    });
  };
  // Interleaved: each repeat runs probe, kernel and baseline of every mode back to back, so that
  // noise from other processes lands on all of them alike, and ratios are taken between
  // neighbours in time.
  std::vector<Samples> samples(plan.modes.size());
  for (int i = 0; i < options.warmup + options.repeats; ++i) {
    for (size_t k = 0; k < plan.modes.size(); ++k) {
      AdamTensors t = state.Tensors(Mode(plan.modes[k]));
      double probe_s = ElapsedSeconds([&] { probe(t); });
      double kernel_s = ElapsedSeconds([&] { kernel(t); });
      double baseline_s = ElapsedSeconds([&] { baseline(t); });
      if (i < options.warmup) continue;
      samples[k].probe.push_back(probe_s);
      samples[k].kernel.push_back(kernel_s);
      samples[k].baseline.push_back(baseline_s);
    }
  }
  for (size_t k = 0; k < plan.modes.size(); ++k) {
    AdamBenchRow row = MakeRow(n, threads, plan.modes[k], samples[k], checks[k]);
    SLUICE_LOG(kInfo, "bench", "adam {} threads {} mode {}: {:.3f} Gparam/s, {:.0f}% of roofline",
               SizeLabel(n), threads, plan.modes[k], row.kernel.gparams_per_second,
               100 * row.roofline_fraction);
    rows.push_back(std::move(row));
  }
}

}  // namespace

Result<AdamBenchReport> RunAdamBench(const AdamBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(AdamBenchPlan plan, MakePlan(options));
  if (plan.isa) kernels::ForceIsa(*plan.isa);
  struct IsaReset {
    ~IsaReset() { kernels::ClearForcedIsa(); }
  } isa_reset;

  AdamHyperparams hyper{.lr = 1e-3f, .weight_decay = 0.01f, .adamw_mode = true, .step = 0};
  AdamBenchReport report;
  report.machine = MachineJson();
  report.settings = SettingsJson(options, plan, hyper);
  AdamThreading all_threads{
      .num_threads = *std::max_element(plan.threads.begin(), plan.threads.end()),
      .cpuset = plan.cpuset.get()};
  for (size_t n : plan.sizes) {
    SLUICE_ASSIGN_OR_RETURN(AdamBenchState state, AdamBenchState::Create(n));
    state.Initialize(all_threads);
    std::vector<CheckResult> checks;
    for (char mode : plan.modes) {
      ++hyper.step;
      checks.push_back(CheckAgainstReference(state.Tensors(Mode(mode)), hyper, all_threads));
    }
    for (int threads : plan.threads) {
      MeasureThreads(state, n, threads, plan, options, checks, hyper, report.rows);
    }
  }
  report.target = EvaluateTarget(report.rows);
  report.machine["load_average_1m_at_end"] = LoadAverage();
  return report;
}

std::string FormatAdamBenchTable(const AdamBenchReport& report) {
  std::string out =
      fmt::format("CPU Adam (AdamW step, fused) on {} | ISA {} | median of {} steps\n",
                  report.machine["cpu"].get<std::string>(),
                  report.settings["isa"].get<std::string>(), report.settings["repeats"].get<int>());
  out += fmt::format("{:<7} {:>7} {:>4} {:>10} {:>8} {:>10} {:>8} {:>8} {:>10} {:>8} {:>6}\n",
                     "size", "threads", "mode", "Gparam/s", "GB/s", "roof Gp/s", "roof GB/s",
                     "of roof", "base Gp/s", "speedup", "check");
  for (const AdamBenchRow& r : report.rows) {
    out += fmt::format(
        "{:<7} {:>7} {:>4} {:>10.3f} {:>8.1f} {:>10.3f} {:>8.1f} {:>7.1f}% {:>10.3f} {:>7.2f}x "
        "{:>6}\n",
        SizeLabel(r.size), r.threads, r.mode, r.kernel.gparams_per_second,
        r.kernel.gbytes_per_second, r.roofline.gparams_per_second, r.roofline.gbytes_per_second,
        100 * r.roofline_fraction, r.baseline.gparams_per_second, r.speedup,
        r.check_passed ? "ok" : "FAIL");
  }
  for (const ModeSpec& mode : kModes) {
    out += fmt::format("mode {}: {}, {} bytes/param\n", mode.name, mode.description,
                       BytesPerParam(mode));
  }
  const nlohmann::json& target = report.target;
  if (!target.is_null()) {
    std::string met = target["met"].is_null()     ? "not evaluated (needs modes a and c)"
                      : target["met"].get<bool>() ? "met"
                                                  : "NOT met";
    out +=
        fmt::format("target at {} x {} threads (every mode >= {:.0f}% of roofline, c >= a): {}\n",
                    SizeLabel(target["size"].get<size_t>()), target["threads"].get<int>(),
                    100 * kTargetFraction, met);
  }
  return out;
}

nlohmann::json AdamBenchJson(const AdamBenchReport& report) {
  nlohmann::json results = nlohmann::json::array();
  for (const AdamBenchRow& r : report.rows) {
    const ModeSpec& mode = Mode(r.mode);
    results.push_back({{"size", r.size},
                       {"size_label", SizeLabel(r.size)},
                       {"threads", r.threads},
                       {"mode", std::string(1, r.mode)},
                       {"grad_dtype", kernels::AdamGradTypeName(mode.grad_type)},
                       {"copy_dtype", kernels::AdamCopyTypeName(mode.copy_type)},
                       {"bytes_per_param", r.bytes_per_param},
                       {"kernel", FigureJson(r.kernel)},
                       {"roofline", FigureJson(r.roofline)},
                       {"baseline", FigureJson(r.baseline)},
                       {"roofline_fraction", r.roofline_fraction},
                       {"speedup_over_baseline", r.speedup},
                       {"check",
                        {{"max_relative_error", r.check_max_relative_error},
                         {"copy_mismatches", r.check_copy_mismatches},
                         {"tolerance", kCheckTolerance},
                         {"passed", r.check_passed}}}});
  }
  return {{"benchmark", "cpu_adam"},   {"schema_version", 1},         {"date", UtcTimestamp()},
          {"machine", report.machine}, {"settings", report.settings}, {"results", results},
          {"target", report.target}};
}

Status RunAdamBenchCommand(const AdamBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(AdamBenchReport report, RunAdamBench(options));
  SLUICE_RETURN_IF_ERROR(PrintTableAndWriteRecord(FormatAdamBenchTable(report),
                                                  AdamBenchJson(report), options.json_path));
  for (const AdamBenchRow& r : report.rows) {
    if (!r.check_passed) {
      return DataLossError(
          "adam kernel disagrees with the reference at size {} mode {}: max relative error {} "
          "(tolerance {}), {} copy mismatches",
          SizeLabel(r.size), r.mode, r.check_max_relative_error, kCheckTolerance,
          r.check_copy_mismatches);
    }
  }
  return OkStatus();
}

}  // namespace sluice::bench
