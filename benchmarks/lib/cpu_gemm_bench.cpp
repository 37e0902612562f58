#include "benchmarks/lib/cpu_gemm_bench.h"

#include <cblas.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "benchmarks/lib/bench_record.h"
#include "benchmarks/lib/cpu_gemm_blis.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_dnnl.h"
#include "kernels/cpu/gemm_fixed.h"
#include "kernels/cpu/gemm_openblas.h"
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
  std::string name;
  std::string description;
  int64_t layers, rows, d_model, d_ff, vocab;  // vocab 0: no LM head (the sweep)
};

const ModelShape kModels[] = {
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

// --shapes sweep: one transformer layer's linear products (no LM head) over the model sizes the
// project trains on CPU, d_model 160 (the demo) to 768 (GPT-2 small), d_ff = 4 d, at 512 and
// 2048 tokens per micro-batch.
constexpr int64_t kSweepDModels[] = {160, 384, 768};
constexpr int64_t kSweepRows[] = {512, 2048};

std::vector<ModelShape> SweepShapes() {
  std::vector<ModelShape> shapes;
  for (int64_t rows : kSweepRows) {
    for (int64_t d : kSweepDModels) {
      shapes.push_back({fmt::format("d{}r{}", d, rows),
                        fmt::format("one layer: d_model {}, d_ff {}, {} rows (tokens per "
                                    "micro-batch)",
                                    d, 4 * d, rows),
                        1, rows, d, 4 * d, 0});
    }
  }
  return shapes;
}

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
  if (model.vocab > 0) AddLinear(cases, model, "lm_head", d, model.vocab, false, 1);
  return cases;
}

// fixed: GemmFixed; dnnl: oneDNN's sgemm; openblas: OpenBLAS on the core Sluice runs it with
// (gemm_openblas.h); openblas-picked: OpenBLAS on the core it picked by itself (run only where
// that differs); blis: BLIS, loaded at run time. The engine's device.cpu_gemm: blas is dnnl where
// built, else openblas (kernels/cpu/gemm.h): the record names which.
// dnnl-matmul: oneDNN's matmul primitive in fp32; dnnl-bf16: the same allowed to round its inputs
// to bf16 (AMX where the CPU has it): bf16's accuracy, so checked to a bf16 bound and not a
// candidate for device.cpu_gemm (kernels/cpu/gemm_dnnl.h).
enum class Backend { kFixed, kDnnl, kDnnlMatmul, kDnnlBf16, kOpenBlas, kOpenBlasPicked, kBlis };

constexpr Backend kAllBackends[] = {
    Backend::kFixed,    Backend::kDnnl,           Backend::kDnnlMatmul, Backend::kDnnlBf16,
    Backend::kOpenBlas, Backend::kOpenBlasPicked, Backend::kBlis};

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kFixed:
      return "fixed";
    case Backend::kDnnl:
      return "dnnl";
    case Backend::kDnnlMatmul:
      return "dnnl-matmul";
    case Backend::kDnnlBf16:
      return "dnnl-bf16";
    case Backend::kOpenBlas:
      return "openblas";
    case Backend::kOpenBlasPicked:
      return "openblas-picked";
    case Backend::kBlis:
      return "blis";
  }
  return "?";
}

struct FloatFreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using FloatBuffer = std::unique_ptr<float[], FloatFreeDeleter>;

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
  std::string openblas_core;        // the core the openblas backend runs (Sluice's choice)
  std::string openblas_picked;      // the core OpenBLAS picked as it loaded
  // What device.cpu_gemm: blas runs in this process, before the backends switch it around.
  kernels::cpu::BlasLibrary engine_library = kernels::cpu::BlasLibrary::kOpenBlas;
  std::string engine_kernel;
  std::string openblas_config;  // openblas_get_config(), which names the core it runs: Sluice's
  std::vector<std::string> skipped;  // backends not run, each with why
  // oneDNN's implementation names the matmul backends ran ("brg:avx512_core_amx"), per backend.
  mutable std::map<Backend, std::set<std::string>> impls;
};

bool Has(const Plan& plan, Backend backend) {
  return std::find(plan.backends.begin(), plan.backends.end(), backend) != plan.backends.end();
}

// Every backend's product, through the entry point the engine would use for it.
Status Call(Backend backend, const Plan& plan, const Operands& o, float* c) {
  namespace cpu = kernels::cpu;
  const GemmCase& g = o.g;
  switch (backend) {
    case Backend::kFixed:
      cpu::SetGemmBackend(GemmBackend::kDeterministic);
      cpu::Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.get(), o.lda, o.b.get(), o.ldb,
                g.beta, c, o.ldc, plan.threads);
      return OkStatus();
    case Backend::kDnnl:
      cpu::SetGemmBackend(GemmBackend::kBlas);
      cpu::SetBlasLibrary(cpu::BlasLibrary::kOneDnn);
      cpu::Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.get(), o.lda, o.b.get(), o.ldb,
                g.beta, c, o.ldc, plan.threads);
      return OkStatus();
    case Backend::kOpenBlas:
    case Backend::kOpenBlasPicked: {
      // The core switches only where the previous call ran the other one (a no-op otherwise).
      const std::string& core =
          backend == Backend::kOpenBlas ? plan.openblas_core : plan.openblas_picked;
      const std::string error = cpu::SwitchOpenBlasCore(core);
      if (!error.empty()) return FailedPreconditionError("OpenBLAS core {}: {}", core, error);
      cpu::SetGemmBackend(GemmBackend::kBlas);
      cpu::SetBlasLibrary(cpu::BlasLibrary::kOpenBlas);
      cpu::Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.get(), o.lda, o.b.get(), o.ldb,
                g.beta, c, o.ldc, plan.threads);
      return OkStatus();
    }
    case Backend::kDnnlMatmul:
    case Backend::kDnnlBf16: {
      std::string impl;
      const std::string error =
          cpu::DnnlMatmul(backend == Backend::kDnnlBf16, g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f,
                          o.a.get(), o.lda, o.b.get(), o.ldb, g.beta, c, o.ldc, &impl);
      if (!error.empty()) return InternalError("{}", error);
      plan.impls[backend].insert(impl);
      return OkStatus();
    }
    case Backend::kBlis:
      BlisGemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.get(), o.lda, o.b.get(), o.ldb,
               g.beta, c, o.ldc);
      return OkStatus();
  }
  return OkStatus();
}

// The check's bound on max_scaled_error: fp32 rounding of a length-k sum, (k + 2)·2^-24; for
// dnnl-bf16 also the rounding of both inputs to bf16 (8 significant bits: 2^-8 each).
double Tolerance(Backend backend, const GemmCase& g) {
  const double fp32 = static_cast<double>(g.k + 2) * kUnitRoundoff;
  return backend == Backend::kDnnlBf16 ? fp32 + 0x1p-7 : fp32;
}

GemmBackendKernel KernelOf(Backend backend, const Plan& plan) {
  namespace cpu = kernels::cpu;
  GemmBackendKernel k;
  k.threads = plan.threads;
  switch (backend) {
    case Backend::kFixed: {
      const cpu::GemmKernel fixed = cpu::DescribeGemmKernel(GemmBackend::kDeterministic);
      k.library = fixed.library;
      k.core = fixed.core;
      k.name = fixed.name;
      return k;
    }
    case Backend::kDnnl:
      k.library = "oneDNN";
      k.version = cpu::DnnlVersion();
      k.core = cpu::DnnlIsa();
      break;
    case Backend::kDnnlMatmul:
    case Backend::kDnnlBf16: {
      k.library = backend == Backend::kDnnlBf16 ? "oneDNN matmul (bf16 inputs)" : "oneDNN matmul";
      k.version = cpu::DnnlVersion();
      for (const std::string& impl : plan.impls[backend]) {
        k.core += (k.core.empty() ? "" : "/") + impl;
      }
      break;
    }
    case Backend::kOpenBlas:
    case Backend::kOpenBlasPicked:
      k.library = "OpenBLAS";
      k.version = cpu::OpenBlasVersion();
      k.core = backend == Backend::kOpenBlas ? plan.openblas_core : plan.openblas_picked;
      break;
    case Backend::kBlis: {
      k.library = "BLIS";
      // "BLIS 0.9.0 haswell (path, OpenMP)": the version and config words.
      const std::string text = BlisDescription();
      const size_t v = text.find(' ') + 1, c = text.find(' ', v) + 1;
      k.version = text.substr(v, c - v - 1);
      k.core = text.substr(c, text.find(' ', c) - c);
      break;
    }
  }
  k.name = k.library + " " + k.version + " " + k.core;
  return k;
}

struct GemmCheck {
  double max_scaled_error = 0;
  double max_rel_diff_vs_fixed = 0;
};

// Runs `backend` once from C = C0 and compares its output with fp64 at the corners and
// kCheckSamples pseudo-random entries, scaled by Σ|a·b| + |beta·c0| (the magnitude the rounding
// error is bounded by), and with GemmFixed's output (which a kFixed call stores) everywhere.
Result<GemmCheck> Check(Backend backend, const Plan& plan, Operands& o) {
  const GemmCase& g = o.g;
  const int64_t count = g.m * g.n;
  std::memcpy(o.c.get(), o.c0.get(), count * sizeof(float));
  SLUICE_RETURN_IF_ERROR(Call(backend, plan, o, o.c.get()));
  if (backend == Backend::kFixed) std::memcpy(o.c_fixed.get(), o.c.get(), count * sizeof(float));

  GemmCheck result;
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
    Result<GemmCheck> check(GemmCheck{});
    estimate[b] = ElapsedSeconds([&] { check = Check(plan.backends[b], plan, o); });
    SLUICE_RETURN_IF_ERROR(check.status());
    f.max_scaled_error = check->max_scaled_error;
    f.max_rel_diff_vs_fixed = check->max_rel_diff_vs_fixed;
    f.tolerance = Tolerance(plan.backends[b], g);
    f.check_passed = f.max_scaled_error <= f.tolerance;
  }
  // Warm-up, timing the last call of each backend to size the samples; C now accumulates (dw)
  // or is overwritten, as in training.
  for (int w = 0; w < options.warmup; ++w) {
    for (size_t b = 0; b < nb; ++b) {
      Status status;
      estimate[b] = ElapsedSeconds([&] { status = Call(plan.backends[b], plan, o, o.c.get()); });
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
          status = Call(plan.backends[b], plan, o, o.c.get());
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
  // One total per model (or sweep point), in the order the cases ran; not for the square.
  for (const GemmBenchRow& row : rows) {
    if (row.gemm.model == "square") continue;
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const GemmModelTotal& t) { return t.model == row.gemm.model; });
    if (it == totals.end()) {
      totals.push_back({row.gemm.model, std::vector<double>(nb, 0.0), {}});
      it = totals.end() - 1;
    }
    for (size_t b = 0; b < nb; ++b) {
      it->seconds[b] += row.gemm.per_step * row.figures[b].median_seconds;
    }
  }
  for (GemmModelTotal& total : totals) {
    for (size_t b = 0; b < nb; ++b)
      total.ratio_to_fixed.push_back(total.seconds[0] / total.seconds[b]);
  }
  return totals;
}

std::string Shape(const GemmCase& g) { return fmt::format("{}x{}x{}", g.m, g.n, g.k); }

std::string Operation(const GemmCase& g) {
  return fmt::format("{}{}", g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N');
}

// Restores what the run changes process-wide: thread counts, the GEMM backend and library,
// OpenBLAS's core, the ISA cap.
class ProcessSettingsGuard {
 public:
  ProcessSettingsGuard()
      : omp_threads_(omp_get_max_threads()),
        blas_threads_(openblas_get_num_threads()),
        backend_(kernels::cpu::CurrentGemmBackend()),
        library_(kernels::cpu::CurrentBlasLibrary()) {}
  ~ProcessSettingsGuard() {
    omp_set_num_threads(omp_threads_);
    openblas_set_num_threads(blas_threads_);
    kernels::cpu::SetGemmBackend(backend_);
    kernels::cpu::SetBlasLibrary(library_);
    kernels::cpu::SwitchOpenBlasCore(kernels::cpu::SettleOpenBlasCore().core);
    kernels::ClearForcedIsa();
  }
  ProcessSettingsGuard(const ProcessSettingsGuard&) = delete;
  ProcessSettingsGuard& operator=(const ProcessSettingsGuard&) = delete;

 private:
  int omp_threads_;
  int blas_threads_;
  GemmBackend backend_;
  kernels::cpu::BlasLibrary library_;
};

// Why a backend cannot run in this process, or "".
std::string Unavailable(Backend backend, const Plan& plan) {
  switch (backend) {
    case Backend::kDnnl:
    case Backend::kDnnlMatmul:
    case Backend::kDnnlBf16: {
      if (!kernels::cpu::DnnlBuilt()) {
        return "oneDNN is not in this build (Debian libdnnl-dev, scripts/install-deps.sh; then "
               "re-run cmake)";
      }
      if (backend == Backend::kDnnl) return "";
      // Whether oneDNN has a matmul for this CPU and ISA cap (bf16 needs AVX-512): a 1x1x1 trial.
      float a = 1, b = 1, c = 0;
      return kernels::cpu::DnnlMatmul(backend == Backend::kDnnlBf16, false, false, 1, 1, 1, 1.0f,
                                      &a, 1, &b, 1, 0.0f, &c, 1);
    }
    case Backend::kOpenBlasPicked:
      return plan.openblas_picked == plan.openblas_core
                 ? fmt::format("OpenBLAS picked {0} itself, which openblas runs",
                               plan.openblas_core)
                 : "";
    case Backend::kBlis:
      return BlisLoad();
    case Backend::kFixed:
    case Backend::kOpenBlas:
      return "";
  }
  return "";
}

// The ISA cap must be in force before this: it decides the core the openblas backend runs.
Result<Plan> MakePlan(const GemmBenchOptions& options) {
  Plan plan;
  SLUICE_ASSIGN_OR_RETURN(plan.cases, GemmBenchCases(options.shapes));
  if (!options.isa.empty()) {
    SLUICE_ASSIGN_OR_RETURN(plan.isa, ParseIsaOption(options.isa));
    // Before OpenBLAS's core and oneDNN's cap are settled (both follow Sluice's ISA).
    kernels::ForceIsa(*plan.isa);
  }
  kernels::cpu::SettleDnnl();
  const kernels::cpu::OpenBlasCore& settled = kernels::cpu::SettleOpenBlasCore();
  plan.openblas_picked = settled.picked;
  plan.openblas_core = settled.core;
  plan.engine_library = kernels::cpu::CurrentBlasLibrary();
  plan.engine_kernel = kernels::cpu::DescribeGemmKernel(GemmBackend::kBlas).name;
  plan.openblas_config = kernels::cpu::OpenBlasConfig();
  // Under --isa, the core for that ISA (an AVX2 machine's Haswell), as SLUICE_ISA would give.
  if (plan.isa.has_value() && std::getenv("OPENBLAS_CORETYPE") == nullptr &&
      !kernels::cpu::OpenBlasCoreFor(*plan.isa).empty()) {
    plan.openblas_core = std::string(kernels::cpu::OpenBlasCoreFor(*plan.isa));
  }

  std::vector<std::string> names = options.backends;
  const bool all = names.empty();
  if (all) {
    for (Backend backend : kAllBackends) names.push_back(BackendName(backend));
  }
  plan.backends.push_back(Backend::kFixed);  // the baseline, always measured
  for (std::string name : names) {
    if (name == "blas") {  // the engine's device.cpu_gemm: blas
      name = plan.engine_library == kernels::cpu::BlasLibrary::kOneDnn ? "dnnl" : "openblas";
    }
    const Backend* found = std::find_if(std::begin(kAllBackends), std::end(kAllBackends),
                                        [&](Backend b) { return name == BackendName(b); });
    if (found == std::end(kAllBackends)) {
      return InvalidArgumentError(
          "--backends: '{}' is not one of fixed, blas, dnnl, dnnl-matmul, dnnl-bf16, openblas, "
          "openblas-picked, blis",
          name);
    }
    const std::string why_not = Unavailable(*found, plan);
    if (!why_not.empty()) {
      // Asked for by name: an error; by default: noted in the table and the record.
      if (!all) return FailedPreconditionError("--backends {}: {}", name, why_not);
      plan.skipped.push_back(fmt::format("{}: {}", name, why_not));
      continue;
    }
    if (!Has(plan, *found)) plan.backends.push_back(*found);
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
  return plan;
}

nlohmann::json SettingsJson(const GemmBenchOptions& options, const Plan& plan,
                            const GemmBenchReport& report) {
  namespace cpu = kernels::cpu;
  nlohmann::json models = nlohmann::json::object();
  for (const ModelShape& model : kModels) models[model.name] = model.description;
  for (const ModelShape& model : SweepShapes()) models[model.name] = model.description;
  models["square"] = fmt::format("{0} x {0} x {0}, NN", kSquare);
  nlohmann::json backends = nlohmann::json::object();
  for (size_t b = 0; b < report.backends.size(); ++b) {
    const GemmBackendKernel& k = report.kernels[b];
    backends[report.backends[b]] = {{"kernel", k.name},
                                    {"library", k.library},
                                    {"version", k.version},
                                    {"core", k.core},
                                    {"threads", k.threads}};
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return {{"shapes", options.shapes},
          {"models", models},
          {"backends", backends},
          {"skipped", plan.skipped},
          {"baseline", "fixed"},
          // What device.cpu_gemm: blas runs in this build, here (its library's row above).
          {"engine_blas",
           {{"library", std::string(cpu::BlasLibraryName(plan.engine_library))},
            {"backend", plan.engine_library == cpu::BlasLibrary::kOneDnn ? "dnnl" : "openblas"},
            {"kernel", plan.engine_kernel}}},
          {"threads", plan.threads},
          {"threads_source", options.threads > 0 ? "--threads" : "omp_get_max_threads()"},
          {"gemm_fixed_isa", std::string(kernels::IsaName(cpu::GemmFixedIsa()))},
          {"isa_cap", options.isa.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.isa)},
          {"openblas_core", plan.openblas_core},
          {"openblas_picked", plan.openblas_picked},
          {"openblas_core_reason", cpu::SettleOpenBlasCore().reason},
          {"openblas_config", plan.openblas_config},
          {"openblas_coretype_env", coretype != nullptr ? nlohmann::json(coretype) : nullptr},
          {"dnnl_built", cpu::DnnlBuilt()},
          {"blis", BlisLoad().empty() ? BlisDescription() : BlisLoad()},
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
                 "Any of demo (configs/demo_gpt.yaml), gpt2 (GPT-2 small), sweep (one layer at "
                 "d_model 160, 384, 768 x 512, 2048 rows), square (1024^3)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--backends", options.backends,
                 "Any of fixed (GemmFixed, always run: the baseline), blas (what device.cpu_gemm "
                 "blas runs), dnnl (oneDNN sgemm), dnnl-matmul, dnnl-bf16 (oneDNN's matmul, fp32 "
                 "or bf16 inputs), openblas (on the core Sluice sets), openblas-picked (on the "
                 "core OpenBLAS picked), blis; default every one available")
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
                 "Cap the ISA: scalar, avx2 or avx512 (GemmFixed's variant, oneDNN's dispatch, "
                 "OpenBLAS's core: Haswell for avx2), to emulate an older CPU; BLIS is not capped");
  app.add_option("--json", options.json_path, "Also write the record as JSON here ('-': stdout)");
}

Result<std::vector<GemmCase>> GemmBenchCases(const std::vector<std::string>& shapes) {
  std::vector<GemmCase> cases;
  if (shapes.empty())
    return InvalidArgumentError("--shapes: give at least one of demo, gpt2, sweep, square");
  for (const std::string& name : shapes) {
    bool found = false;
    for (const ModelShape& model : kModels) {
      if (name != model.name) continue;
      std::vector<GemmCase> more = ModelCases(model);
      cases.insert(cases.end(), more.begin(), more.end());
      found = true;
    }
    if (name == "sweep") {
      for (const ModelShape& model : SweepShapes()) {
        std::vector<GemmCase> more = ModelCases(model);
        cases.insert(cases.end(), more.begin(), more.end());
      }
      found = true;
    }
    if (name == "square") {
      cases.push_back({"square", "square", "nn", false, false, kSquare, kSquare, kSquare, 0.0f, 1});
      found = true;
    }
    if (!found) {
      return InvalidArgumentError("--shapes: '{}' is not one of demo, gpt2, sweep, square", name);
    }
  }
  return cases;
}

Result<GemmBenchReport> RunGemmBench(const GemmBenchOptions& options) {
  ProcessSettingsGuard guard;
  SLUICE_ASSIGN_OR_RETURN(Plan plan, MakePlan(options));
  // GemmFixed gets the count per call; OpenBLAS and BLIS keep their own; oneDNN (OpenMP) runs
  // on omp_get_max_threads().
  omp_set_num_threads(plan.threads);
  openblas_set_num_threads(plan.threads);
  if (Has(plan, Backend::kBlis)) BlisSetThreads(plan.threads);

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
  for (Backend backend : plan.backends) {
    report.backends.push_back(BackendName(backend));
    report.kernels.push_back(KernelOf(backend, plan));
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
    out += fmt::format("  {:<15} = {}{}\n", report.backends[b], report.kernels[b].name,
                       b == 0 ? " (baseline)" : "");
  }
  for (const auto& skipped : s["skipped"]) {
    out += fmt::format("  not run: {}\n", skipped.get<std::string>());
  }
  out += fmt::format("  device.cpu_gemm blas runs {} here: the {} column\n",
                     s["engine_blas"]["kernel"].get<std::string>(),
                     s["engine_blas"]["backend"].get<std::string>());
  out += fmt::format("{:<9} {:<9} {:<4} {:<2} {:>17} {:>4} {:>3}", "model", "layer", "prod", "op",
                     "m x n x k", "beta", "rep");
  std::vector<size_t> widths;
  for (size_t b = 0; b < report.backends.size(); ++b) {
    widths.push_back(std::max<size_t>(report.backends[b].size(), 6));
    out += fmt::format(" | {:>{}} GF/s", report.backends[b], widths[b]);
    if (b > 0) out += fmt::format(" {:>7}", "x fixed");
  }
  out += fmt::format(" | {:>8} {:>5}\n", "max diff", "check");
  for (const GemmBenchRow& r : report.rows) {
    const GemmCase& g = r.gemm;
    out += fmt::format("{:<9} {:<9} {:<4} {:<2} {:>17} {:>4} {:>3}", g.model, g.layer, g.product,
                       Operation(g), Shape(g), g.beta, r.repeats);
    double max_diff = 0;
    std::string failed;
    for (size_t b = 0; b < r.figures.size(); ++b) {
      const GemmBackendFigure& f = r.figures[b];
      out += fmt::format(" | {:>{}.1f}", f.gflops, widths[b] + 5);
      if (b > 0) out += fmt::format(" {:>6.2f}x", f.ratio_to_fixed);
      if (f.backend != "dnnl-bf16") max_diff = std::max(max_diff, f.max_rel_diff_vs_fixed);
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
      "|c - c_fixed| / max |c_fixed| (of every backend but dnnl-bf16); check: every backend "
      "within (k + 2)·2^-24 of fp64 (dnnl-bf16: + 2^-7)\n";
  return out;
}

nlohmann::json GemmBenchJson(const GemmBenchReport& report) {
  nlohmann::json results = nlohmann::json::array();
  for (const GemmBenchRow& r : report.rows) {
    const GemmCase& g = r.gemm;
    nlohmann::json backends = nlohmann::json::object();
    for (size_t b = 0; b < r.figures.size(); ++b) {
      const GemmBackendFigure& f = r.figures[b];
      backends[f.backend] = {{"kernel", report.kernels[b].name},
                             {"median_seconds", f.median_seconds},
                             {"gflops", f.gflops},
                             {"ratio_to_fixed", f.ratio_to_fixed},
                             {"calls_per_sample", f.calls_per_sample},
                             {"samples_seconds", f.samples_seconds},
                             {"check",
                              {{"max_scaled_error", f.max_scaled_error},
                               {"tolerance", f.tolerance},
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
  return {{"benchmark", "cpu_gemm"},   {"schema_version", 2},         {"date", UtcTimestamp()},
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
            f.max_scaled_error, f.tolerance);
      }
    }
  }
  return OkStatus();
}

}  // namespace sluice::bench
