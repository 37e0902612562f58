#include "benchmarks/lib/cpu_gemm_bench.h"

#include <cblas.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "benchmarks/lib/bench_record.h"
#include "benchmarks/lib/cpu_gemm_dnnl.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_fixed.h"
#include "runtime/logging.h"

namespace sluice::bench {
namespace {

using kernels::cpu::GemmBackend;

constexpr int kMinRepeats = 3;
constexpr int kCheckSamples = 256;  // fp64 reference entries per case, besides the 4 corners
constexpr double kUnitRoundoff = 0x1p-24;

// The linear shapes of a GPT-2-family model as engine/model builds it: a fused q, k, v
// projection (c_attn, d -> 3d), the attention output (c_proj, d -> d), the MLP (c_fc, d -> d_ff;
// c_proj, d_ff -> d), all with bias, and the LM head tied to the token embedding (d -> vocab, no
// bias). rows = micro-batch x sequence length.
struct ModelShape {
  const char* name;
  const char* description;
  int64_t layers, rows, d_model, d_ff, vocab;
};

constexpr ModelShape kModels[] = {
    {"demo",
     "configs/demo_gpt.yaml: gpt2 family, 4 layers, d_model 160, d_ff 640 (4 d), vocab 256 "
     "(bytes), rows 512 (micro-batch 8 x seq 64)",
     4, 512, 160, 640, 256},
    {"gpt2",
     "GPT-2 small: 12 layers, d_model 768, d_ff 3072, vocab 50257, rows 512 (micro-batch 2 x "
     "seq 256)",
     12, 512, 768, 3072, 50257},
};

constexpr int64_t kSquare = 1024;

// The three products of a linear [in -> out] at `rows` rows (kernels/cpu/ops_linear.cpp).
void AddLinear(std::vector<GemmCase>& cases, const ModelShape& model, const char* layer, int64_t in,
               int64_t out, bool bias, int per_step) {
  const int64_t rows = model.rows;
  // y [rows, out] = x [rows, in] · wᵀ (+ the bias, pre-filled into y: beta 1).
  cases.push_back(
      {model.name, layer, "fwd", false, true, rows, out, in, bias ? 1.0f : 0.0f, per_step});
  // dx [rows, in] = dy [rows, out] · w [out, in].
  cases.push_back({model.name, layer, "dx", false, false, rows, in, out, 0.0f, per_step});
  // dw [out, in] += dyᵀ · x.
  cases.push_back({model.name, layer, "dw", true, false, out, in, rows, 1.0f, per_step});
}

std::vector<GemmCase> ModelCases(const ModelShape& model) {
  std::vector<GemmCase> cases;
  const int64_t d = model.d_model;
  const int layers = static_cast<int>(model.layers);
  AddLinear(cases, model, "attn.qkv", d, 3 * d, true, layers);
  AddLinear(cases, model, "attn.proj", d, d, true, layers);
  AddLinear(cases, model, "mlp.fc", d, model.d_ff, true, layers);
  AddLinear(cases, model, "mlp.proj", model.d_ff, d, true, layers);
  AddLinear(cases, model, "lm_head", d, model.vocab, false, 1);
  return cases;
}

enum class Backend { kFixed, kBlas, kDnnl };

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kFixed:
      return "fixed";
    case Backend::kBlas:
      return "blas";
    case Backend::kDnnl:
      return "dnnl";
  }
  return "?";
}

// What a backend runs on this machine; oneDNN names its ISA only once it has dispatched a GEMM.
std::string KernelName(Backend backend) {
  switch (backend) {
    case Backend::kFixed:
      return kernels::cpu::GemmKernelName(GemmBackend::kDeterministic);
    case Backend::kBlas:
      return kernels::cpu::GemmKernelName(GemmBackend::kBlas);
    case Backend::kDnnl:
      return DnnlDescription();
  }
  return "?";
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using FloatBuffer = std::unique_ptr<float[], FreeDeleter>;

Result<FloatBuffer> Allocate(int64_t count, const char* what) {
  size_t bytes = (static_cast<size_t>(count) * sizeof(float) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, std::max<size_t>(bytes, 4096));
  if (p == nullptr) {
    return ResourceExhaustedError(
        "allocating {} bytes for {}: out of memory; leave gpt2 out of --shapes", bytes, what);
  }
  return FloatBuffer(static_cast<float*>(p));
}

// Deterministic values in [-1, 1) (a multiplicative hash of the index and a seed).
void Fill(float* p, int64_t count, uint32_t seed) {
  for (int64_t i = 0; i < count; ++i) {
    uint32_t h = (static_cast<uint32_t>(i) ^ seed * 0x9e3779b9u) * 2654435761u;
    p[i] = static_cast<float>((h >> 8) & 0xffffffu) * 0x1p-23f - 1.0f;
  }
}

// One case's operands, stored as the training step stores them: op(A) is m x k, A stored
// [k, m] when trans_a; op(B) is k x n, B stored [n, k] when trans_b.
struct Operands {
  GemmCase g;
  int64_t lda = 0, ldb = 0, ldc = 0;
  FloatBuffer a, b, c0, c, c_fixed;

  float A(int64_t i, int64_t p) const { return g.trans_a ? a[p * lda + i] : a[i * lda + p]; }
  float B(int64_t p, int64_t j) const { return g.trans_b ? b[j * ldb + p] : b[p * ldb + j]; }
};

Result<Operands> MakeOperands(const GemmCase& g) {
  Operands o;
  o.g = g;
  o.lda = g.trans_a ? g.m : g.k;
  o.ldb = g.trans_b ? g.k : g.n;
  o.ldc = g.n;
  SLUICE_ASSIGN_OR_RETURN(o.a, Allocate(g.m * g.k, "A"));
  SLUICE_ASSIGN_OR_RETURN(o.b, Allocate(g.k * g.n, "B"));
  SLUICE_ASSIGN_OR_RETURN(o.c0, Allocate(g.m * g.n, "C (initial)"));
  SLUICE_ASSIGN_OR_RETURN(o.c, Allocate(g.m * g.n, "C"));
  SLUICE_ASSIGN_OR_RETURN(o.c_fixed, Allocate(g.m * g.n, "C (GemmFixed's)"));
  Fill(o.a.get(), g.m * g.k, 1);
  Fill(o.b.get(), g.k * g.n, 2);
  Fill(o.c0.get(), g.m * g.n, 3);
  return o;
}

// The options, checked and parsed: the run-wide settings every call shares.
struct Plan {
  std::vector<GemmCase> cases;
  std::vector<Backend> backends;  // kFixed first
  int threads = 0;
  std::optional<kernels::Isa> isa;  // --isa's cap, if any
};

bool Has(const Plan& plan, Backend backend) {
  return std::find(plan.backends.begin(), plan.backends.end(), backend) != plan.backends.end();
}

Status Call(Backend backend, const Operands& o, float* c, int threads) {
  const GemmCase& g = o.g;
  switch (backend) {
    case Backend::kFixed:
    case Backend::kBlas:
      // Through the engine's entry point, as the linear ops call it.
      kernels::cpu::SetGemmBackend(backend == Backend::kFixed ? GemmBackend::kDeterministic
                                                              : GemmBackend::kBlas);
      kernels::cpu::Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.get(), o.lda, o.b.get(),
                         o.ldb, g.beta, c, o.ldc, threads);
      return OkStatus();
    case Backend::kDnnl:
      return DnnlGemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.get(), o.lda, o.b.get(), o.ldb,
                      g.beta, c, o.ldc);
  }
  return OkStatus();
}

struct CheckResult {
  double max_scaled_error = 0;
  double max_rel_diff_vs_fixed = 0;
};

// Runs `backend` once from C = C0 and compares its output with fp64 at the corners and
// kCheckSamples pseudo-random entries, scaled by Σ|a·b| + |beta·c0| (the magnitude the rounding
// error is bounded by), and with GemmFixed's output (which a kFixed call stores) everywhere.
Result<CheckResult> Check(Backend backend, Operands& o, int threads) {
  const GemmCase& g = o.g;
  const int64_t count = g.m * g.n;
  std::memcpy(o.c.get(), o.c0.get(), count * sizeof(float));
  SLUICE_RETURN_IF_ERROR(Call(backend, o, o.c.get(), threads));
  if (backend == Backend::kFixed) std::memcpy(o.c_fixed.get(), o.c.get(), count * sizeof(float));

  CheckResult result;
  std::vector<std::pair<int64_t, int64_t>> entries = {
      {0, 0}, {0, g.n - 1}, {g.m - 1, 0}, {g.m - 1, g.n - 1}};
  uint64_t state = 0x2545f4914f6cdd1dull;
  for (int s = 0; s < kCheckSamples; ++s) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    entries.emplace_back(static_cast<int64_t>((state >> 33) % g.m),
                         static_cast<int64_t>((state >> 11) % g.n));
  }
  for (auto [i, j] : entries) {
    double sum = 0, magnitude = 0;
    for (int64_t p = 0; p < g.k; ++p) {
      double term = static_cast<double>(o.A(i, p)) * o.B(p, j);
      sum += term;
      magnitude += std::fabs(term);
    }
    const double c0 = o.c0[i * o.ldc + j];
    const double want = sum + g.beta * c0;
    const double scale = magnitude + std::fabs(g.beta * c0);
    const float got = o.c[i * o.ldc + j];
    const double error =
        std::isfinite(got) ? std::fabs(got - want) / std::max(scale, 1e-30) : HUGE_VAL;
    result.max_scaled_error = std::max(result.max_scaled_error, error);
  }
  double max_diff = 0, max_value = 0;
  for (int64_t e = 0; e < count; ++e) {
    const double diff = std::fabs(static_cast<double>(o.c[e]) - o.c_fixed[e]);
    max_diff = std::isnan(diff) ? HUGE_VAL : std::max(max_diff, diff);
    max_value = std::max(max_value, std::fabs(static_cast<double>(o.c_fixed[e])));
  }
  result.max_rel_diff_vs_fixed = max_value > 0 ? max_diff / max_value : max_diff;
  return result;
}

Result<GemmBenchRow> MeasureCase(const GemmCase& g, const Plan& plan,
                                 const GemmBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(Operands o, MakeOperands(g));
  const size_t nb = plan.backends.size();
  GemmBenchRow row;
  row.gemm = g;
  row.tolerance = static_cast<double>(g.k + 2) * kUnitRoundoff;
  row.figures.resize(nb);

  // The check first: it also faults the pages of C in and starts the thread pools.
  std::vector<double> estimate(nb);
  for (size_t b = 0; b < nb; ++b) {
    GemmBackendFigure& f = row.figures[b];
    f.backend = BackendName(plan.backends[b]);
    Result<CheckResult> check(CheckResult{});
    estimate[b] = ElapsedSeconds([&] { check = Check(plan.backends[b], o, plan.threads); });
    SLUICE_RETURN_IF_ERROR(check.status());
    f.max_scaled_error = check->max_scaled_error;
    f.max_rel_diff_vs_fixed = check->max_rel_diff_vs_fixed;
    f.check_passed = f.max_scaled_error <= row.tolerance;
  }
  // Warm-up, timing the last call of each backend to size the samples; C now accumulates (dw)
  // or is overwritten, as in training.
  for (int w = 0; w < options.warmup; ++w) {
    for (size_t b = 0; b < nb; ++b) {
      Status status;
      estimate[b] =
          ElapsedSeconds([&] { status = Call(plan.backends[b], o, o.c.get(), plan.threads); });
      SLUICE_RETURN_IF_ERROR(status);
    }
  }
  double repeat_seconds = 0;
  for (size_t b = 0; b < nb; ++b) {
    row.figures[b].calls_per_sample = static_cast<int>(
        std::clamp(std::ceil(options.min_sample_seconds / std::max(estimate[b], 1e-9)), 1.0, 1e6));
    repeat_seconds += row.figures[b].calls_per_sample * estimate[b];
  }
  row.repeats = static_cast<int>(
      std::clamp(std::floor(options.max_case_seconds / std::max(repeat_seconds, 1e-9)),
                 static_cast<double>(kMinRepeats), static_cast<double>(options.repeats)));

  // Interleaved: each repeat times every backend back to back, so that other processes' noise
  // lands on all of them alike and ratios compare neighbours in time.
  for (int r = 0; r < row.repeats; ++r) {
    for (size_t b = 0; b < nb; ++b) {
      GemmBackendFigure& f = row.figures[b];
      Status status;
      double seconds = ElapsedSeconds([&] {
        for (int i = 0; i < f.calls_per_sample && status.ok(); ++i) {
          status = Call(plan.backends[b], o, o.c.get(), plan.threads);
        }
      });
      SLUICE_RETURN_IF_ERROR(status);
      f.samples_seconds.push_back(seconds / f.calls_per_sample);
    }
  }
  for (GemmBackendFigure& f : row.figures) {
    f.median_seconds = Median(f.samples_seconds);
    f.gflops = g.Flops() / f.median_seconds * 1e-9;
    f.ratio_to_fixed = MedianRatio(row.figures[0].samples_seconds, f.samples_seconds);
  }
  return row;
}

std::vector<GemmModelTotal> ModelTotals(const std::vector<GemmBenchRow>& rows, size_t nb) {
  std::vector<GemmModelTotal> totals;
  for (const ModelShape& model : kModels) {
    GemmModelTotal total{model.name, std::vector<double>(nb, 0.0), {}};
    bool any = false;
    for (const GemmBenchRow& row : rows) {
      if (row.gemm.model != model.name) continue;
      any = true;
      for (size_t b = 0; b < nb; ++b) {
        total.seconds[b] += row.gemm.per_step * row.figures[b].median_seconds;
      }
    }
    if (!any) continue;
    for (size_t b = 0; b < nb; ++b)
      total.ratio_to_fixed.push_back(total.seconds[0] / total.seconds[b]);
    totals.push_back(std::move(total));
  }
  return totals;
}

std::string Shape(const GemmCase& g) { return fmt::format("{}x{}x{}", g.m, g.n, g.k); }

std::string Operation(const GemmCase& g) {
  return fmt::format("{}{}", g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N');
}

// Restores what the run changes process-wide: thread counts, the GEMM backend, the ISA cap.
class ProcessSettingsGuard {
 public:
  ProcessSettingsGuard()
      : omp_threads_(omp_get_max_threads()),
        blas_threads_(openblas_get_num_threads()),
        backend_(kernels::cpu::CurrentGemmBackend()) {}
  ~ProcessSettingsGuard() {
    omp_set_num_threads(omp_threads_);
    openblas_set_num_threads(blas_threads_);
    kernels::cpu::SetGemmBackend(backend_);
    kernels::ClearForcedIsa();
  }
  ProcessSettingsGuard(const ProcessSettingsGuard&) = delete;
  ProcessSettingsGuard& operator=(const ProcessSettingsGuard&) = delete;

 private:
  int omp_threads_;
  int blas_threads_;
  GemmBackend backend_;
};

Result<Plan> MakePlan(const GemmBenchOptions& options) {
  Plan plan;
  SLUICE_ASSIGN_OR_RETURN(plan.cases, GemmBenchCases(options.shapes));
  std::vector<std::string> names = options.backends;
  if (names.empty()) {
    names = {"fixed", "blas"};
    if (DnnlBuilt()) names.push_back("dnnl");
  }
  plan.backends.push_back(Backend::kFixed);  // the baseline, always measured
  for (const std::string& name : names) {
    if (name != "fixed" && name != "blas" && name != "dnnl") {
      return InvalidArgumentError("--backends: '{}' is not one of fixed, blas, dnnl", name);
    }
    if (name == "dnnl" && !DnnlBuilt()) {
      return FailedPreconditionError("--backends dnnl: {}", DnnlDescription());
    }
    const Backend backend = name == "fixed"  ? Backend::kFixed
                            : name == "blas" ? Backend::kBlas
                                             : Backend::kDnnl;
    if (!Has(plan, backend)) plan.backends.push_back(backend);
  }
  if (options.threads < 0) {
    return InvalidArgumentError("--threads = {}: give a count, or 0 for the engine's default",
                                options.threads);
  }
  plan.threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  if (options.repeats < kMinRepeats) {
    return InvalidArgumentError("--repeats = {}: figures are medians of at least {} samples",
                                options.repeats, kMinRepeats);
  }
  if (options.warmup < 0) return InvalidArgumentError("--warmup = {} must be >= 0", options.warmup);
  if (!(options.max_case_seconds > 0) || !(options.min_sample_seconds >= 0)) {
    return InvalidArgumentError(
        "--max-case-seconds = {} must be > 0 and --min-sample-seconds = {} >= 0",
        options.max_case_seconds, options.min_sample_seconds);
  }
  if (!options.isa.empty()) {
    SLUICE_ASSIGN_OR_RETURN(plan.isa, ParseIsaOption(options.isa));
  }
  return plan;
}

nlohmann::json SettingsJson(const GemmBenchOptions& options, const Plan& plan,
                            const GemmBenchReport& report) {
  nlohmann::json models = nlohmann::json::object();
  for (const ModelShape& model : kModels) models[model.name] = model.description;
  models["square"] = fmt::format("{0} x {0} x {0}, NN", kSquare);
  nlohmann::json backends = nlohmann::json::object();
  for (size_t b = 0; b < report.backends.size(); ++b) {
    backends[report.backends[b]] = report.kernel_names[b];
  }
  const kernels::cpu::BlasInfo blas = kernels::cpu::DescribeBlas();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return {{"shapes", options.shapes},
          {"models", models},
          {"backends", backends},
          {"baseline", "fixed"},
          {"threads", plan.threads},
          {"threads_source", options.threads > 0 ? "--threads" : "omp_get_max_threads()"},
          {"gemm_fixed_isa", std::string(kernels::IsaName(kernels::cpu::GemmFixedIsa()))},
          {"isa_cap", options.isa.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.isa)},
          {"openblas_core", blas.core},
          {"openblas_config", blas.config},
          {"openblas_threads", blas.threads},
          {"openblas_coretype_env", coretype != nullptr ? nlohmann::json(coretype) : nullptr},
          {"dnnl", DnnlDescription()},
          {"dnnl_built", DnnlBuilt()},
          {"repeats", options.repeats},
          {"min_repeats", kMinRepeats},
          {"warmup", options.warmup},
          {"max_case_seconds", options.max_case_seconds},
          {"min_sample_seconds", options.min_sample_seconds},
          {"alpha", 1.0},
          {"gflops", "2·m·n·k / median seconds per call"},
          {"ratio_to_fixed",
           "median over repeats of GemmFixed's per-call time / the backend's, from neighbouring "
           "samples"},
          {"check",
           "before timing, from C = C0: max |c - c64| / (Σ|a·b| + |beta·c0|) over the corners and "
           "256 sampled entries against an fp64 product (must be <= (k + 2)·2^-24), and max "
           "|c - c_fixed| / max |c_fixed| over every entry"}};
}

}  // namespace

void AddGemmBenchOptions(CLI::App& app, GemmBenchOptions& options) {
  app.add_option("--shapes", options.shapes,
                 "Any of demo (configs/demo_gpt.yaml), gpt2 (GPT-2 small), square (1024^3)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--backends", options.backends,
                 "Any of fixed (GemmFixed, always run: the baseline), blas (OpenBLAS), dnnl "
                 "(oneDNN, when built); default all built")
      ->delimiter(',');
  app.add_option("--threads", options.threads,
                 "Threads for every backend; 0: the engine's default, omp_get_max_threads()")
      ->capture_default_str();
  app.add_option("--repeats", options.repeats, "Timed samples per figure (median reported), >= 3")
      ->capture_default_str();
  app.add_option("--warmup", options.warmup, "Untimed calls per backend before timing")
      ->capture_default_str();
  app.add_option("--max-case-seconds", options.max_case_seconds,
                 "Fewer repeats (at least 3) where a case would take longer than this")
      ->capture_default_str();
  app.add_option("--min-sample-seconds", options.min_sample_seconds,
                 "A sample repeats the call until it lasts about this long")
      ->capture_default_str();
  app.add_option("--isa", options.isa,
                 "Cap GemmFixed's (and oneDNN's) ISA: scalar, avx2 or avx512; OpenBLAS's core "
                 "is set by OPENBLAS_CORETYPE in the environment");
  app.add_option("--json", options.json_path, "Also write the record as JSON here ('-': stdout)");
}

Result<std::vector<GemmCase>> GemmBenchCases(const std::vector<std::string>& shapes) {
  std::vector<GemmCase> cases;
  if (shapes.empty())
    return InvalidArgumentError("--shapes: give at least one of demo, gpt2, square");
  for (const std::string& name : shapes) {
    bool found = false;
    for (const ModelShape& model : kModels) {
      if (name != model.name) continue;
      std::vector<GemmCase> more = ModelCases(model);
      cases.insert(cases.end(), more.begin(), more.end());
      found = true;
    }
    if (name == "square") {
      cases.push_back({"square", "square", "nn", false, false, kSquare, kSquare, kSquare, 0.0f, 1});
      found = true;
    }
    if (!found) {
      return InvalidArgumentError("--shapes: '{}' is not one of demo, gpt2, square", name);
    }
  }
  return cases;
}

Result<GemmBenchReport> RunGemmBench(const GemmBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(Plan plan, MakePlan(options));
  ProcessSettingsGuard guard;
  if (plan.isa) {
    kernels::ForceIsa(*plan.isa);
    if (Has(plan, Backend::kDnnl)) SLUICE_RETURN_IF_ERROR(DnnlCapIsa(*plan.isa));
  }
  // GemmFixed gets the count per call; OpenBLAS keeps its own pool; oneDNN (OpenMP) runs on
  // omp_get_max_threads().
  omp_set_num_threads(plan.threads);
  openblas_set_num_threads(plan.threads);

  GemmBenchReport report;
  report.machine = MachineJson();
  report.machine["amx"] = kernels::DetectCpuFeatures().amx;
  for (const GemmCase& g : plan.cases) {
    SLUICE_ASSIGN_OR_RETURN(GemmBenchRow row, MeasureCase(g, plan, options));
    std::string line = fmt::format("gemm {} {} {} {}:", g.model, g.layer, g.product, Shape(g));
    for (const GemmBackendFigure& f : row.figures) {
      line += fmt::format(" {} {:.1f} GFLOP/s", f.backend, f.gflops);
    }
    SLUICE_LOG(kInfo, "bench", "{}", line);
    report.rows.push_back(std::move(row));
  }
  // After the runs, while the ISA cap still holds: oneDNN names its ISA once it has dispatched.
  for (Backend backend : plan.backends) {
    report.backends.push_back(BackendName(backend));
    report.kernel_names.push_back(KernelName(backend));
  }
  report.totals = ModelTotals(report.rows, plan.backends.size());
  report.settings = SettingsJson(options, plan, report);
  report.machine["load_average_1m_at_end"] = LoadAverage();
  return report;
}

std::string FormatGemmBenchTable(const GemmBenchReport& report) {
  const nlohmann::json& s = report.settings;
  std::string out = fmt::format(
      "CPU GEMM (fp32) on {} | {} threads ({}) | median of up to {} samples after {} warm-up\n",
      report.machine["cpu"].get<std::string>(), s["threads"].get<int>(),
      s["threads_source"].get<std::string>(), s["repeats"].get<int>(), s["warmup"].get<int>());
  for (size_t b = 0; b < report.backends.size(); ++b) {
    out += fmt::format("  {:<5} = {}{}\n", report.backends[b], report.kernel_names[b],
                       b == 0 ? " (baseline)" : "");
  }
  if (std::find(report.backends.begin(), report.backends.end(), "dnnl") == report.backends.end()) {
    out += s["dnnl_built"].get<bool>()
               ? "  dnnl  : not selected (--backends)\n"
               : fmt::format("  dnnl  : not run: {}\n", s["dnnl"].get<std::string>());
  }
  out += fmt::format("{:<6} {:<9} {:<4} {:<2} {:>17} {:>4} {:>3}", "model", "layer", "prod", "op",
                     "m x n x k", "beta", "rep");
  for (size_t b = 0; b < report.backends.size(); ++b) {
    out += fmt::format(" | {:>5} GF/s", report.backends[b]);
    if (b > 0) out += fmt::format(" {:>7}", "x fixed");
  }
  out += fmt::format(" | {:>8} {:>5}\n", "max diff", "check");
  for (const GemmBenchRow& r : report.rows) {
    const GemmCase& g = r.gemm;
    out += fmt::format("{:<6} {:<9} {:<4} {:<2} {:>17} {:>4} {:>3}", g.model, g.layer, g.product,
                       Operation(g), Shape(g), g.beta, r.repeats);
    double max_diff = 0;
    std::string failed;
    for (size_t b = 0; b < r.figures.size(); ++b) {
      const GemmBackendFigure& f = r.figures[b];
      out += fmt::format(" | {:>10.1f}", f.gflops);
      if (b > 0) out += fmt::format(" {:>6.2f}x", f.ratio_to_fixed);
      max_diff = std::max(max_diff, f.max_rel_diff_vs_fixed);
      if (!f.check_passed) failed += (failed.empty() ? "FAIL " : ",") + f.backend;
    }
    out += fmt::format(" | {:>8.1e} {:>5}\n", max_diff, failed.empty() ? "ok" : failed);
  }
  for (const GemmModelTotal& t : report.totals) {
    out += fmt::format("{} step (every product x its layer count):", t.model);
    for (size_t b = 0; b < t.seconds.size(); ++b) {
      out += fmt::format(" {} {:.2f} ms", report.backends[b], 1e3 * t.seconds[b]);
      if (b > 0) out += fmt::format(" ({:.2f}x)", t.ratio_to_fixed[b]);
    }
    out += "\n";
  }
  out +=
      "x fixed: speed relative to GemmFixed in the same run (> 1 is faster); max diff: max "
      "|c - c_fixed| / max |c_fixed|; check: every backend within (k + 2)·2^-24 of fp64\n";
  return out;
}

nlohmann::json GemmBenchJson(const GemmBenchReport& report) {
  nlohmann::json results = nlohmann::json::array();
  for (const GemmBenchRow& r : report.rows) {
    const GemmCase& g = r.gemm;
    nlohmann::json backends = nlohmann::json::object();
    for (size_t b = 0; b < r.figures.size(); ++b) {
      const GemmBackendFigure& f = r.figures[b];
      backends[f.backend] = {{"kernel", report.kernel_names[b]},
                             {"median_seconds", f.median_seconds},
                             {"gflops", f.gflops},
                             {"ratio_to_fixed", f.ratio_to_fixed},
                             {"calls_per_sample", f.calls_per_sample},
                             {"samples_seconds", f.samples_seconds},
                             {"check",
                              {{"max_scaled_error", f.max_scaled_error},
                               {"tolerance", r.tolerance},
                               {"max_rel_diff_vs_fixed", f.max_rel_diff_vs_fixed},
                               {"passed", f.check_passed}}}};
    }
    results.push_back({{"model", g.model},
                       {"layer", g.layer},
                       {"product", g.product},
                       {"trans_a", g.trans_a},
                       {"trans_b", g.trans_b},
                       {"m", g.m},
                       {"n", g.n},
                       {"k", g.k},
                       {"beta", g.beta},
                       {"flops", g.Flops()},
                       {"per_step", g.per_step},
                       {"repeats", r.repeats},
                       {"backends", backends}});
  }
  nlohmann::json totals = nlohmann::json::array();
  for (const GemmModelTotal& t : report.totals) {
    nlohmann::json per_backend = nlohmann::json::object();
    for (size_t b = 0; b < t.seconds.size(); ++b) {
      per_backend[report.backends[b]] = {{"seconds", t.seconds[b]},
                                         {"ratio_to_fixed", t.ratio_to_fixed[b]}};
    }
    totals.push_back({{"model", t.model}, {"backends", per_backend}});
  }
  return {{"benchmark", "cpu_gemm"},   {"schema_version", 1},         {"date", UtcTimestamp()},
          {"machine", report.machine}, {"settings", report.settings}, {"results", results},
          {"step_totals", totals}};
}

Status RunGemmBenchCommand(const GemmBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(GemmBenchReport report, RunGemmBench(options));
  SLUICE_RETURN_IF_ERROR(PrintTableAndWriteRecord(FormatGemmBenchTable(report),
                                                  GemmBenchJson(report), options.json_path));
  for (const GemmBenchRow& r : report.rows) {
    for (const GemmBackendFigure& f : r.figures) {
      if (!f.check_passed) {
        return DataLossError(
            "{} disagrees with an fp64 product at {} {} {} ({}): max scaled error {} "
            "(tolerance {})",
            f.backend, r.gemm.model, r.gemm.layer, r.gemm.product, Shape(r.gemm),
            f.max_scaled_error, r.tolerance);
      }
    }
  }
  return OkStatus();
}

}  // namespace sluice::bench
