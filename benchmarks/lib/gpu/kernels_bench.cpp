#include "benchmarks/lib/gpu/kernels_bench.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>
#include <optional>

#include "benchmarks/lib/bench_record.h"
#include "benchmarks/lib/gpu/bench_case.h"
#include "benchmarks/lib/gpu/cases.h"
#include "runtime/device/cuda/cuda_call.h"
#include "runtime/logging.h"

namespace sluice::bench {
namespace {

using gpu::BenchCase;
using gpu::CaseRun;
using gpu::SampleTimer;
using gpu::Work;

constexpr int64_t kRooflineGemmN = 8192;
constexpr size_t kRooflineCopyBytes = size_t{1} << 30;
// A sample rotates through at least this many L2 sizes of buffers (and at most kMaxInstances
// copies of an op's buffers), so that memory-bound ops are timed from DRAM, not from L2.
constexpr double kRotationL2Multiple = 4;
constexpr int kMaxInstances = 32;
constexpr int kRooflineWarmup = 50;
constexpr int kQuickRepeats = 5;
constexpr int kQuickWarmup = 1;
// A copy@size copies half the bytes its op moves, rounded to this many bytes (whole bf16 values
// and vector-width rows; the rate is taken from the bytes actually copied).
constexpr size_t kCopyAlign = 16;
// The copy@size seeds start here, apart from the ops', so that the ops' inputs do not depend on
// how many copies ran before them.
constexpr uint64_t kCopySeedBase = uint64_t{1} << 32;

// A memory-bound op's copy@size: a device-to-device cudaMemcpyAsync moving the bytes the op
// moves (half of them read, half written), measured right after the op by the same method (its
// own rotation through at least 4x the L2, the same warm-up, samples and median). The 1 GiB
// roofline is what DRAM sustains; this is what a copy reaches at the op's size, launch latency
// and ramp-up included: the figure that explains a small op's gap to the target, which stays
// defined against the 1 GiB roofline.
struct CopyAtSize {
  size_t bytes_copied = 0;  // the copy's size; it moves twice that (read + write)
  int instances = 0;
  SampleTimer::Timing timing;
  double rate = 0;    // bytes moved per second
  std::string error;  // set when the copy failed; the op's own figures stand
};

struct KernelBenchRow {
  BenchCase spec;  // build is not used after the run
  int instances = 0;
  SampleTimer::Timing timing;
  double rate = 0;      // FLOP/s or bytes/s
  double fraction = 0;  // of the roofline of the same kind
  CaseRun::CheckResult check;
  bool check_ran = false;
  std::string error;  // set when building, launching or checking failed
  // Set for the memory-bound ops whose launch and check passed.
  std::optional<CopyAtSize> copy_at_size;

  bool ok() const { return error.empty() && check_ran && check.passed(); }
  bool met() const { return ok() && spec.target > 0 && fraction >= spec.target; }
  // The op's rate over its copy@size's; 0 where there is none.
  double copy_fraction() const {
    if (!ok() || !copy_at_size || copy_at_size->rate <= 0) return 0;
    return rate / copy_at_size->rate;
  }
};

struct GpuInfo {
  nlohmann::json json;
  std::string name;
  size_t l2_bytes = 0;
};

struct KernelBenchReport {
  nlohmann::json machine;
  GpuInfo gpu;
  nlohmann::json settings;
  // The roofline rows (model "start" and "end"), measured before and after the ops; the figure
  // used is the higher of the two (clocks that drift down during the run then count against
  // the ops, not for them).
  std::vector<KernelBenchRow> rooflines;
  double peak_flops = 0;
  double copy_bytes_per_second = 0;
  std::vector<KernelBenchRow> rows;
};

bool Matches(const std::string& name, const std::vector<std::string>& patterns) {
  if (patterns.empty()) return true;
  for (const std::string& p : patterns) {
    if (p.find_first_of("*?[") != std::string::npos) {
      if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
    } else if (name.find(p) != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::vector<BenchCase> AllCases() {
  std::vector<BenchCase> cases;
  auto append = [&cases](std::vector<BenchCase> more) {
    for (BenchCase& c : more) cases.push_back(std::move(c));
  };
  for (const gpu::LlamaShape& model : gpu::BenchModels()) {
    append(gpu::LinearCases(model));
    append(gpu::AttentionCases(model));
    append(gpu::NormCases(model));
    append(gpu::ActivationCases(model));
    append(gpu::EmbeddingLossCases(model));
  }
  cases.push_back(gpu::SquareGemmCase(kRooflineGemmN));
  append(gpu::FlatCases());
  return cases;
}

Result<std::vector<BenchCase>> SelectCases(const KernelBenchOptions& options) {
  std::vector<BenchCase> all = AllCases();
  for (const std::string& m : options.models) {
    bool known =
        std::any_of(all.begin(), all.end(), [&](const BenchCase& c) { return c.model == m; });
    if (!known) return InvalidArgumentError("--models: '{}' is not one of 1b, 7b, flat", m);
  }
  std::vector<BenchCase> selected;
  for (BenchCase& c : all) {
    const bool model_ok =
        options.models.empty() ||
        std::find(options.models.begin(), options.models.end(), c.model) != options.models.end();
    // The square GEMM belongs to no model; --models leaves it out unless it names none.
    if (model_ok && Matches(c.op, options.ops) &&
        (c.model != gpu::kNoModel || options.models.empty())) {
      selected.push_back(std::move(c));
    }
  }
  if (selected.empty()) {
    std::vector<std::string> names;
    for (const BenchCase& c : AllCases()) {
      if (std::find(names.begin(), names.end(), c.op) == names.end()) names.push_back(c.op);
    }
    return InvalidArgumentError("--ops / --models select no op; the ops are: {}",
                                fmt::join(names, ", "));
  }
  return selected;
}

std::string VersionText(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

Result<GpuInfo> ProbeGpu(int device) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    cudaGetLastError();
    std::string why =
        rc == cudaSuccess ? "cudaGetDeviceCount found 0 devices" : internal::CudaErrorText(rc);
    // What CUDA answers on a machine with no driver at all.
    if (rc == cudaErrorInsufficientDriver) {
      why += fmt::format(
          "; that is: no NVIDIA driver, or one older than the CUDA {} runtime "
          "this binary was built with",
          VersionText(CUDART_VERSION));
    }
    return UnavailableError(
        "no CUDA GPU on this machine ({}): `sluice bench kernels` times the CUDA kernels and "
        "needs an NVIDIA GPU with its driver",
        why);
  }
  if (device < 0 || device >= count) {
    return InvalidArgumentError("--device {}: this machine has {} CUDA GPU(s), 0 to {}", device,
                                count, count - 1);
  }
  SLUICE_TRY_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  SLUICE_TRY_CUDA(cudaGetDeviceProperties(&prop, device));
  int runtime = 0, driver = 0, l2 = 0, sms = 0, cublas_major = 0, cublas_minor = 0,
      cublas_patch = 0;
  SLUICE_TRY_CUDA(cudaRuntimeGetVersion(&runtime));
  SLUICE_TRY_CUDA(cudaDriverGetVersion(&driver));
  SLUICE_TRY_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  SLUICE_TRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  char bus_id[32] = {};
  cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
  size_t free_bytes = 0, total_bytes = 0;
  SLUICE_TRY_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  GpuInfo info;
  info.name = prop.name;
  info.l2_bytes = static_cast<size_t>(l2);
  info.json = {{"index", device},
               {"name", prop.name},
               {"pci_bus_id", bus_id},
               {"sm", prop.major * 10 + prop.minor},
               {"multiprocessors", sms},
               {"memory_bytes", static_cast<uint64_t>(prop.totalGlobalMem)},
               {"free_memory_bytes_at_start", static_cast<uint64_t>(free_bytes)},
               {"l2_cache_bytes", l2},
               {"cuda_driver", VersionText(driver)},
               {"cuda_runtime", VersionText(runtime)},
               {"cublas", fmt::format("{}.{}.{}", cublas_major, cublas_minor, cublas_patch)},
               {"cublaslt_version", cublasLtGetVersion()}};
  return info;
}

int InstancesFor(const BenchCase& c, size_t l2_bytes) {
  const double rotation = kRotationL2Multiple * static_cast<double>(l2_bytes);
  if (c.footprint_bytes <= 0) return 1;
  const double n = std::ceil(rotation / c.footprint_bytes);
  return static_cast<int>(std::clamp(n, 1.0, static_cast<double>(kMaxInstances)));
}

// Builds, checks and times one case; errors go into the row, so that one failing op does not
// hide the figures of the others.
KernelBenchRow Measure(const BenchCase& spec, cudaStream_t stream, SampleTimer& timer,
                       const GpuInfo& gpu, int warmup, int repeats, uint64_t seed) {
  KernelBenchRow row;
  row.spec = spec;
  row.spec.build = nullptr;
  row.instances = InstancesFor(spec, gpu.l2_bytes);
  const std::string what = fmt::format("{} ({})", spec.op, spec.model);
  auto result = [&]() -> Status {
    CaseRun run(stream, seed);
    SLUICE_RETURN_IF_ERROR(spec.build(run, row.instances));
    SLUICE_ASSIGN_OR_RETURN(row.check, run.RunChecked(what));
    row.check_ran = true;
    SLUICE_ASSIGN_OR_RETURN(row.timing, timer.Time(run.launches(), warmup, repeats, what));
    return OkStatus();
  }();
  // Leave no error of this case behind for the next one (a sticky error stays, and fails it).
  cudaError_t pending = cudaStreamSynchronize(stream);
  if (result.ok() && pending != cudaSuccess) {
    result = InternalError("{}: {}", what, internal::CudaErrorText(pending));
  }
  cudaGetLastError();
  if (!result.ok()) {
    row.error = result.ToString();
    SLUICE_LOG(kError, "bench", "{}: {}", what, row.error);
    return row;
  }
  if (row.timing.median_seconds > 0) row.rate = spec.amount / row.timing.median_seconds;
  if (!row.check.passed()) {
    SLUICE_LOG(kError, "bench",
               "{}: check failed: {} of {} output values are NaN or infinite, "
               "{} error flag(s) raised",
               what, row.check.non_finite, row.check.checked_elements, row.check.raised_flags);
  }
  if (row.timing.unblocked) {
    SLUICE_LOG(kWarn, "bench",
               "{}: a launcher waits on the device; timed without the blocking "
               "kernel, so the figure includes the host's enqueueing",
               what);
  }
  return row;
}

size_t CopyBytesFor(double bytes_moved) {
  const double units = std::max(1.0, std::round(bytes_moved / 2 / kCopyAlign));
  return static_cast<size_t>(units) * kCopyAlign;
}

// The copy@size of `op` (a memory-bound row that ran); a failure goes into the result and the
// log, not into the op's row.
CopyAtSize MeasureCopyAtSize(const KernelBenchRow& op, cudaStream_t stream, SampleTimer& timer,
                             const GpuInfo& gpu, int warmup, int repeats, uint64_t seed) {
  CopyAtSize copy;
  copy.bytes_copied = CopyBytesFor(op.spec.amount);
  BenchCase c = gpu::CopyRoofline(copy.bytes_copied);
  c.op = op.spec.op + " copy@size";
  c.model = op.spec.model;
  KernelBenchRow row = Measure(c, stream, timer, gpu, warmup, repeats, seed);
  copy.instances = row.instances;
  copy.timing = std::move(row.timing);
  copy.rate = row.rate;
  if (!row.error.empty()) {
    copy.error = row.error;
  } else if (!row.ok()) {
    copy.error = "the copy's output check failed";
  }
  return copy;
}

std::string FormatTime(double seconds) {
  if (seconds <= 0) return "-";
  if (seconds < 1e-3) return fmt::format("{:.1f} us", seconds * 1e6);
  return fmt::format("{:.3f} ms", seconds * 1e3);
}

std::string FormatRate(const KernelBenchRow& r) {
  if (r.rate <= 0) return "-";
  return r.spec.work == Work::kFlops ? fmt::format("{:.1f} TFLOP/s", r.rate * 1e-12)
                                     : fmt::format("{:.0f} GB/s", r.rate * 1e-9);
}

std::string Now() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

std::string CheckText(const KernelBenchRow& r) {
  if (!r.error.empty()) return "ERROR";
  if (!r.check_ran) return "-";
  return r.check.passed() ? "ok" : "FAIL";
}

std::string FormatCopyAtSize(const KernelBenchRow& r) {
  if (!r.copy_at_size) return "-";
  if (!r.copy_at_size->error.empty()) return "ERROR";
  return r.copy_at_size->rate > 0 ? fmt::format("{:.0f} GB/s", r.copy_at_size->rate * 1e-9) : "-";
}

// The memory-bound ops (rated in GB/s against the copy roofline), for the summaries.
struct MemoryBoundSummary {
  int count = 0;
  int met = 0;              // the target, against the 1 GiB copy
  int at_copy_at_size = 0;  // at least the target's fraction of their copy@size (not a target)
};

MemoryBoundSummary SummarizeMemoryBound(const std::vector<KernelBenchRow>& rows) {
  MemoryBoundSummary s;
  for (const KernelBenchRow& r : rows) {
    if (r.spec.work != Work::kBytes || r.spec.target <= 0) continue;
    ++s.count;
    if (r.met()) ++s.met;
    if (r.copy_fraction() >= r.spec.target) ++s.at_copy_at_size;
  }
  return s;
}

std::string FormatTable(const KernelBenchReport& report) {
  std::string out = fmt::format(
      "CUDA kernels on {} | cuBLAS peak {:.1f} TFLOP/s (bf16 {}^3), copy {:.0f} GB/s "
      "(1 GiB device to device, read + write) | median of {} samples\n"
      "% roof, target and met: against those rooflines. copy@size: the same device-to-device "
      "copy moving as many bytes as the op (half read, half written), timed the same way right "
      "after it; % copy@size = achieved / copy@size (explains a gap, is not the target)\n",
      report.gpu.name, report.peak_flops * 1e-12, kRooflineGemmN,
      report.copy_bytes_per_second * 1e-9, report.settings["repeats"].get<int>());
  const char* header =
      "{:<26} {:<5} {:<30} {:<28} {:>11} {:>14} {:>7} {:>6} {:>4} {:>10} {:>11} {:>5}\n";
  out += fmt::format(fmt::runtime(header), "op", "model", "shape", "dtype", "median", "achieved",
                     "% roof", "target", "met", "copy@size", "% copy@size", "check");
  auto line = [&](const KernelBenchRow& r) {
    const bool has_target = r.spec.target > 0;
    const double copy_fraction = r.copy_fraction();
    out += fmt::format(fmt::runtime(header), r.spec.op, r.spec.model, r.spec.shape, r.spec.dtype,
                       FormatTime(r.timing.median_seconds), FormatRate(r),
                       r.fraction > 0 ? fmt::format("{:.1f}%", 100 * r.fraction) : "-",
                       has_target ? fmt::format("{:.0f}%", 100 * r.spec.target) : "-",
                       has_target ? (r.met() ? "yes" : "NO") : "-", FormatCopyAtSize(r),
                       copy_fraction > 0 ? fmt::format("{:.1f}%", 100 * copy_fraction) : "-",
                       CheckText(r));
  };
  for (const KernelBenchRow& r : report.rooflines) line(r);
  for (const KernelBenchRow& r : report.rows) line(r);
  int with_target = 0, met = 0, failed = 0;
  for (const KernelBenchRow& r : report.rows) {
    if (!r.ok()) ++failed;
    if (r.spec.target > 0) ++with_target;
    if (r.met()) ++met;
  }
  out += fmt::format("targets met: {} of {}; ops failing their launch or check: {}\n", met,
                     with_target, failed);
  const MemoryBoundSummary memory = SummarizeMemoryBound(report.rows);
  if (memory.count > 0) {
    out += fmt::format(
        "memory-bound ops: {} of {} at >= {:.0f}% of the 1 GiB copy (the target); {} of {} at "
        ">= {:.0f}% of their copy@size\n",
        memory.met, memory.count, 100 * gpu::kMemoryTarget, memory.at_copy_at_size, memory.count,
        100 * gpu::kMemoryTarget);
  }
  for (const KernelBenchRow& r : report.rows) {
    if (!r.error.empty()) out += fmt::format("  {} {}: {}\n", r.spec.op, r.spec.model, r.error);
    if (r.copy_at_size && !r.copy_at_size->error.empty()) {
      out += fmt::format("  {} {} copy@size: {}\n", r.spec.op, r.spec.model, r.copy_at_size->error);
    }
  }
  return out;
}

nlohmann::json CopyAtSizeJson(const KernelBenchRow& r) {
  if (!r.copy_at_size) return nullptr;
  const CopyAtSize& c = *r.copy_at_size;
  nlohmann::json copy = {{"bytes_copied", c.bytes_copied},
                         {"work_per_launch", 2.0 * static_cast<double>(c.bytes_copied)},
                         {"instances", c.instances},
                         {"median_seconds", c.timing.median_seconds},
                         {"samples_seconds", c.timing.samples_seconds},
                         {"achieved_per_second", c.rate},
                         {"achieved_gbytes_per_second", c.rate * 1e-9},
                         {"op_fraction", r.copy_fraction()}};
  if (!c.error.empty()) copy["error"] = c.error;
  return copy;
}

nlohmann::json RowJson(const KernelBenchRow& r) {
  nlohmann::json row = {
      {"op", r.spec.op},
      {"model", r.spec.model},
      {"shape", r.spec.shape},
      {"dtype", r.spec.dtype},
      {"unit", r.spec.work == Work::kFlops ? "flop" : "byte"},
      {"work_per_launch", r.spec.amount},
      {"work_formula", r.spec.formula},
      {"instances", r.instances},
      {"median_seconds", r.timing.median_seconds},
      {"samples_seconds", r.timing.samples_seconds},
      {"timed_without_blocking_kernel", r.timing.unblocked},
      {"achieved_per_second", r.rate},
      {r.spec.work == Work::kFlops ? "achieved_tflops" : "achieved_gbytes_per_second",
       r.spec.work == Work::kFlops ? r.rate * 1e-12 : r.rate * 1e-9},
      {"roofline_fraction", r.fraction},
      {"target_fraction", r.spec.target > 0 ? nlohmann::json(r.spec.target) : nullptr},
      {"met", r.spec.target > 0 ? nlohmann::json(r.met()) : nullptr},
      {"copy_at_size", CopyAtSizeJson(r)},
      {"check",
       {{"ran", r.check_ran},
        {"checked_elements", r.check.checked_elements},
        {"non_finite", r.check.non_finite},
        {"raised_error_flags", r.check.raised_flags},
        {"passed", r.check_ran && r.check.passed()}}}};
  if (!r.error.empty()) row["error"] = r.error;
  return row;
}

nlohmann::json ReportJson(const KernelBenchReport& report) {
  nlohmann::json rooflines = nlohmann::json::array();
  for (const KernelBenchRow& r : report.rooflines) rooflines.push_back(RowJson(r));
  nlohmann::json results = nlohmann::json::array();
  int with_target = 0, met = 0, failed = 0;
  for (const KernelBenchRow& r : report.rows) {
    results.push_back(RowJson(r));
    if (!r.ok()) ++failed;
    if (r.spec.target > 0) ++with_target;
    if (r.met()) ++met;
  }
  const MemoryBoundSummary memory = SummarizeMemoryBound(report.rows);
  // Version 2: copy_at_size per result, summary.memory_bound, the attention target's scope.
  return {{"benchmark", "cuda_kernels"},
          {"schema_version", 2},
          {"date", Now()},
          {"machine", report.machine},
          {"gpu", report.gpu.json},
          {"settings", report.settings},
          {"rooflines",
           {{"gemm_flops_per_second", report.peak_flops},
            {"copy_bytes_per_second", report.copy_bytes_per_second},
            {"rule", "the higher of the measurements before and after the ops"},
            {"measurements", rooflines}}},
          {"results", results},
          {"summary",
           {{"with_target", with_target},
            {"met", met},
            {"failed", failed},
            {"memory_bound",
             {{"with_target", memory.count},
              {"met", memory.met},
              {"at_target_fraction_of_copy_at_size", memory.at_copy_at_size}}}}}};
}

nlohmann::json SettingsJson(const KernelBenchOptions& options, int warmup, int repeats) {
  nlohmann::json models = nlohmann::json::array();
  for (const gpu::LlamaShape& m : gpu::BenchModels()) {
    models.push_back({{"name", m.name},
                      {"hidden", m.hidden},
                      {"intermediate", m.intermediate},
                      {"heads", m.heads},
                      {"kv_heads", m.kv_heads},
                      {"head_dim", m.head_dim},
                      {"vocab", m.vocab},
                      {"rope_theta", m.rope_theta},
                      {"batch", m.batch},
                      {"seq", m.seq}});
  }
  return {{"repeats", repeats},
          {"warmup", warmup},
          {"quick", options.quick},
          {"ops", options.ops},
          {"models_selected", options.models},
          {"models", models},
          {"flat_elements", gpu::kFlatElements},
          {"timing",
           "CUDA events around the launches of one sample, held back by a blocking kernel until "
           "all are enqueued; a sample rotates through `instances` copies of the op's buffers "
           "(at least 4x the L2 size, at most 32); time per launch = sample time / instances; "
           "median over the samples after the warm-up samples"},
          {"check", "outputs poisoned (NaN, or 0 where accumulated), one run, no NaN/inf allowed"},
          {"targets",
           {{"linear", gpu::kGemmTarget},
            {"attention_fwd_bwd", gpu::kAttentionTarget},
            {"attention_fwd_bwd_scope",
             {{"seq", gpu::kAttentionTargetSeq}, {"head_dim", gpu::kAttentionTargetHeadDim}}},
            {"memory_bound", gpu::kMemoryTarget}}},
          {"copy_at_size",
           "memory-bound ops only: a cudaMemcpyAsync device to device of half the bytes the op "
           "moves (rounded to 16 bytes), so that it moves as many; timed like the ops (its own "
           "rotation, the same warm-up and samples, the median) right after its op; an "
           "explanation figure, the targets stay against the 1 GiB copy"}};
}

void PrintList(const std::vector<BenchCase>& cases) {
  std::string out =
      fmt::format("{:<26} {:<5} {:<30} {:<7} {}\n", "op", "model", "shape", "counts", "formula");
  for (const BenchCase& c : cases) {
    out += fmt::format("{:<26} {:<5} {:<30} {:<7} {}\n", c.op, c.model, c.shape,
                       c.work == Work::kFlops ? "FLOPs" : "bytes", c.formula);
  }
  std::fputs(out.c_str(), stdout);
}

struct StreamDeleter {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};

Result<KernelBenchReport> RunKernelBench(const KernelBenchOptions& options,
                                         const std::vector<BenchCase>& cases) {
  const int repeats = options.quick ? std::min(options.repeats, kQuickRepeats) : options.repeats;
  const int warmup = options.quick ? std::min(options.warmup, kQuickWarmup) : options.warmup;
  if (repeats < 1) return InvalidArgumentError("--repeats {}: at least 1", options.repeats);
  if (warmup < 0) return InvalidArgumentError("--warmup {}: at least 0", options.warmup);

  KernelBenchReport report;
  SLUICE_ASSIGN_OR_RETURN(report.gpu, ProbeGpu(options.device));
  report.machine = MachineJson();
  report.settings = SettingsJson(options, warmup, repeats);
  cudaStream_t raw_stream = nullptr;
  SLUICE_TRY_CUDA(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, StreamDeleter> stream(raw_stream);
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<SampleTimer> timer, SampleTimer::Create(stream.get()));

  const auto start = std::chrono::steady_clock::now();
  uint64_t seed = 1;
  uint64_t copy_seed = kCopySeedBase;
  // Before the ops (a failure there leaves nothing to rate them by) and after them (a failure
  // there, say a sticky error an op left behind, only loses the second figure).
  auto measure_rooflines = [&](const std::string& when) -> Status {
    for (BenchCase c :
         {gpu::CublasGemmRoofline(kRooflineGemmN), gpu::CopyRoofline(kRooflineCopyBytes)}) {
      c.model = when;
      // Enough warm-up for the clocks to settle from idle, whatever --warmup says.
      KernelBenchRow row = Measure(c, stream.get(), *timer, report.gpu,
                                   std::max(warmup, kRooflineWarmup), repeats, seed++);
      if (!row.ok()) {
        return InternalError("roofline {} ({}) failed: {}", c.op, when,
                             row.error.empty() ? "its output check failed" : row.error);
      }
      SLUICE_LOG(kInfo, "bench", "{} ({}): {}", c.op, when, FormatRate(row));
      double& best = c.work == Work::kFlops ? report.peak_flops : report.copy_bytes_per_second;
      best = std::max(best, row.rate);
      report.rooflines.push_back(std::move(row));
    }
    return OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(measure_rooflines("start").WithContext("no op can be rated"));
  for (const BenchCase& c : cases) {
    KernelBenchRow row = Measure(c, stream.get(), *timer, report.gpu, warmup, repeats, seed++);
    if (row.ok() && c.work == Work::kBytes) {
      row.copy_at_size =
          MeasureCopyAtSize(row, stream.get(), *timer, report.gpu, warmup, repeats, copy_seed++);
    }
    if (row.ok()) {
      SLUICE_LOG(kInfo, "bench", "{} {}: {} in {}{}", c.op, c.model, FormatRate(row),
                 FormatTime(row.timing.median_seconds),
                 row.copy_fraction() > 0
                     ? fmt::format(" ({:.1f}% of copy@size {})", 100 * row.copy_fraction(),
                                   FormatCopyAtSize(row))
                     : "");
    }
    report.rows.push_back(std::move(row));
  }
  Status end = measure_rooflines("end");
  if (!end.ok()) {
    SLUICE_LOG(kWarn, "bench", "{}; the ops are rated by the rooflines measured at the start",
               end.ToString());
  }
  for (KernelBenchRow& r : report.rooflines) {
    const double roof =
        r.spec.work == Work::kFlops ? report.peak_flops : report.copy_bytes_per_second;
    r.fraction = roof > 0 ? r.rate / roof : 0;
  }
  for (KernelBenchRow& r : report.rows) {
    const double roof =
        r.spec.work == Work::kFlops ? report.peak_flops : report.copy_bytes_per_second;
    r.fraction = roof > 0 && r.rate > 0 ? r.rate / roof : 0;
  }
  report.machine["load_average_1m_at_end"] = LoadAverage();
  report.settings["wall_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

void AddKernelBenchOptions(CLI::App& app, KernelBenchOptions& options) {
  app.add_option("--ops", options.ops,
                 "Ops to run: substrings of their names, or globs (linear, attention, '*.bwd'); "
                 "default all; --list shows them")
      ->delimiter(',');
  app.add_option("--models", options.models, "Shapes to run: 1b, 7b, flat (default all)")
      ->delimiter(',');
  app.add_option("--repeats", options.repeats, "Timed samples per op (median reported)")
      ->capture_default_str();
  app.add_option("--warmup", options.warmup, "Untimed samples before timing")
      ->capture_default_str();
  app.add_flag(
      "--quick", options.quick,
      fmt::format("Fewer samples: at most {} timed and {} warm-up", kQuickRepeats, kQuickWarmup));
  app.add_flag("--list", options.list, "List the selected ops and their FLOP/byte formulas");
  app.add_option("--device", options.device, "CUDA device index")->capture_default_str();
  app.add_option("--json", options.json_path, "Write the JSON record here ('-' for stdout)");
}

Status RunKernelBenchCommand(const KernelBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<BenchCase> cases, SelectCases(options));
  if (options.list) {
    PrintList(cases);
    return OkStatus();
  }
  SLUICE_ASSIGN_OR_RETURN(KernelBenchReport report, RunKernelBench(options, cases));
  SLUICE_RETURN_IF_ERROR(
      PrintTableAndWriteRecord(FormatTable(report), ReportJson(report), options.json_path));
  std::vector<std::string> failed;
  for (const KernelBenchRow& r : report.rows) {
    if (!r.ok()) failed.push_back(fmt::format("{} ({})", r.spec.op, r.spec.model));
  }
  if (!failed.empty()) {
    return InternalError("{} op(s) failed their launch or output check: {}", failed.size(),
                         fmt::join(failed, ", "));
  }
  return OkStatus();
}

}  // namespace sluice::bench
