// The CUDA kernel benchmark, shared by benchmarks/bench_kernels and `sluice bench kernels`
// (built only with CUDA; docs/benchmarks.md describes it).
//
// Every op of kernels/cuda at the shapes of a ~1B Llama (hidden 2048, intermediate 8192, 32/8
// heads of 64, vocab 128256) and of Llama-2-7B (hidden 4096, intermediate 11008, 32/32 heads of
// 128, vocab 32000), bf16, batch 2 x seq 2048, plus the flat-buffer ops over 2^28 elements.
// Each op's rate (TFLOP/s for GEMMs and attention, GB/s of the bytes it must move for the rest)
// is set against a roofline measured in the same run: cublasGemmEx bf16 8192^3 with fp32
// compute, and a 1 GiB device-to-device cudaMemcpyAsync (bytes read + written). Targets (issue
// 18): linear layers >= 75% of the GEMM peak, attention forward + backward at seq 2048, head dim
// 128 >= 45% of it (the 1b model's head dim 64 runs without a target), memory-bound ops >= 70% of
// the copy bandwidth. Each memory-bound op also gets its copy@size: the same copy moving the
// op's bytes, timed the same way, which shows how much of a small op's gap to the 1 GiB figure
// a copy of its size has too. Each op's outputs are checked to be finite. Timing: bench_case.h.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct KernelBenchOptions {
  // Patterns over op names ("linear", "attention.fwd", "*.bwd"): a pattern with * ? or [ is a
  // glob over the whole name, any other is a substring. Empty: every op.
  std::vector<std::string> ops;
  std::vector<std::string> models;  // "1b", "7b", "flat"; empty: all
  int repeats = 30;                 // timed samples per op; the median is reported
  int warmup = 5;                   // untimed samples first
  bool quick = false;               // caps repeats at 5 and warmup at 1
  bool list = false;                // print the selected ops and their formulas, run nothing
  int device = 0;
  std::string json_path;
};

// Adds --ops, --models, --repeats, --warmup, --quick, --list, --device and --json to `app`.
void AddKernelBenchOptions(CLI::App& app, KernelBenchOptions& options);

// Runs, prints the table, writes --json if asked. Unavailable ("no CUDA GPU ...") without a
// GPU; fails when an op's launch or check failed (after printing and writing the record).
// Missed targets do not fail it: they are figures to report.
Status RunKernelBenchCommand(const KernelBenchOptions& options);

}  // namespace sluice::bench
