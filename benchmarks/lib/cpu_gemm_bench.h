// The CPU GEMM benchmark, shared by benchmarks/bench_gemm and `sluice bench gemm`.
//
// The products a training step runs for every linear layer, y = x·Wᵀ (fwd, NT), dx = dy·W (dx,
// NN) and dW += dyᵀ·x (dw, TN, beta 1), at the linear shapes of the demo (configs/demo_gpt.yaml)
// and of GPT-2 small, one layer's over d_model 160..768 at 512 and 2048 rows (sweep), plus a 1024³
// square, each timed through every backend in one process, on
// the same buffers and interleaved (each repeat runs every backend back to back):
//   fixed            GemmFixed, the engine's default (device.cpu_gemm: deterministic), in the
//                    ISA variant CPUID, SLUICE_ISA or --isa select: the baseline of every ratio;
//   dnnl             oneDNN's dnnl_sgemm, when configure found libdnnl-dev: device.cpu_gemm blas
//                    in such a build;
//   openblas         OpenBLAS cblas_sgemm on the core Sluice sets for the CPU (gemm_openblas.h):
//                    device.cpu_gemm blas in a build without oneDNN;
//   openblas-picked  OpenBLAS on the core it picked by itself, where that differs (Debian 12's
//                    Prescott on Sapphire Rapids), switched per sample in the same process;
//   dnnl-matmul      oneDNN's matmul primitive, fp32; dnnl-bf16 the same with its inputs rounded to
//                    bf16 (AMX where the CPU has it): bf16 accuracy, timed for the record;
//   blis             BLIS's bli_sgemm, where Debian's libblis4-openmp is installed (dlopen).
// Rates are 2·m·n·k / the median per-call time of --repeats samples after --warmup calls; a
// sample runs as many calls as last about --min-sample-seconds. Ratios are medians of per-repeat
// ratios of neighbouring samples. Before timing, every backend's output is checked against an
// fp64 product at sampled entries, and against GemmFixed's output everywhere.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct GemmBenchOptions {
  std::vector<std::string> shapes = {"demo", "gpt2", "square"};  // and "sweep"
  // fixed, blas (the engine's), dnnl, openblas, openblas-picked, blis; empty: every one available
  std::vector<std::string> backends;
  int threads = 0;                   // 0: what the engine uses, omp_get_max_threads()
  int repeats = 5;                   // timed samples per figure, at most (see max_case_seconds)
  int warmup = 1;                    // untimed calls per backend before timing
  double max_case_seconds = 2.0;     // fewer repeats (never below 3) where a case would take longer
  double min_sample_seconds = 0.02;  // a sample repeats the call until it lasts about this long
  std::string isa;                   // "", "scalar", "avx2", "avx512": caps GemmFixed and oneDNN
  std::string json_path;
};

// Adds --shapes, --backends, --threads, --repeats, --warmup, --max-case-seconds,
// --min-sample-seconds, --isa and --json to `app`.
void AddGemmBenchOptions(CLI::App& app, GemmBenchOptions& options);

// One product of one linear layer (or the square).
struct GemmCase {
  std::string model;    // "demo", "gpt2", "square", or a sweep point "d384r2048"
  std::string layer;    // "attn.qkv", "attn.proj", "mlp.fc", "mlp.proj", "lm_head", "square"
  std::string product;  // "fwd" (NT), "dx" (NN), "dw" (TN, beta 1), "nn"
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float beta = 0;
  int per_step = 1;  // how often one micro-batch step runs it (the layer count; 1 for lm_head)
  double Flops() const { return 2.0 * static_cast<double>(m) * n * k; }
};

struct GemmBackendFigure {
  std::string backend;  // "fixed", "dnnl", "openblas", "openblas-picked", "blis"
  double median_seconds = 0;
  double gflops = 0;                    // Flops() / median_seconds / 1e9
  std::vector<double> samples_seconds;  // per call, one per repeat
  int calls_per_sample = 1;
  double ratio_to_fixed = 0;    // median of per-repeat fixed time / this time: > 1 is faster
  double max_scaled_error = 0;  // max |c - c64| / (|alpha|·Σ|a·b| + |beta·c0|) at sampled entries
  double max_rel_diff_vs_fixed = 0;  // max |c - c_fixed| / max |c_fixed| over every entry
  double tolerance = 0;  // on max_scaled_error: the row's, plus 2^-7 for dnnl-bf16's inputs
  bool check_passed = false;
};

struct GemmBenchRow {
  GemmCase gemm;
  int repeats = 0;
  double tolerance = 0;  // fp32's on max_scaled_error: (k + 2)·2^-24, the worst-case bound
  std::vector<GemmBackendFigure> figures;  // in the order of the report's backends
};

// A model's GEMM time per micro-batch step (each product times per_step), per backend.
struct GemmModelTotal {
  std::string model;
  std::vector<double> seconds;         // per backend, from the medians
  std::vector<double> ratio_to_fixed;  // fixed seconds / these seconds
};

// What a backend runs here, named as kernels/cpu/gemm.h's GemmKernel names the engine's.
struct GemmBackendKernel {
  std::string library;  // "GemmFixed", "oneDNN", "OpenBLAS", "BLIS"
  std::string version;
  std::string core;  // ISA variant, dispatch ISA, OpenBLAS core, BLIS config
  std::string name;  // library version core
  int threads = 0;
};

struct GemmBenchReport {
  nlohmann::json machine;
  nlohmann::json settings;
  std::vector<std::string> backends;       // "fixed" first
  std::vector<GemmBackendKernel> kernels;  // per backend
  std::vector<GemmBenchRow> rows;
  std::vector<GemmModelTotal> totals;
};

// The cases --shapes selects, without running anything.
Result<std::vector<GemmCase>> GemmBenchCases(const std::vector<std::string>& shapes);

Result<GemmBenchReport> RunGemmBench(const GemmBenchOptions& options);

std::string FormatGemmBenchTable(const GemmBenchReport& report);
nlohmann::json GemmBenchJson(const GemmBenchReport& report);

// Runs, prints the table, writes --json if asked. Fails when a correctness check failed.
Status RunGemmBenchCommand(const GemmBenchOptions& options);

}  // namespace sluice::bench
