// The CPU Adam benchmark, shared by benchmarks/bench_cpu_adam and `sluice bench adam`.
//
// For each size, thread count and mode it measures, in one process and interleaved so that noise
// hits all three alike: the fused kernel (AdamStep), the memory probe with the kernel's exact
// loads and stores (its rate is the roofline), and the plain scalar-loop Adam (the reference, run
// on the same threads) as the baseline. Rates are from the median of --repeats timed steps after
// --warmup untimed ones; ratios (fraction of roofline, speed-up) are medians of per-repeat ratios
// of neighbouring measurements, which other processes' noise disturbs far less. Before timing,
// each size and mode is checked against the reference.
//
// Modes: (a) fp32 grads, no copy; (b) fp32 grads + bf16 copy; (c) bf16 grads + bf16 copy.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct AdamBenchOptions {
  std::vector<std::string> sizes = {"2^20", "2^24", "2^27"};  // "2^k" or an element count
  std::vector<std::string> threads;  // counts or ranges "1-16"; empty: 1, 2, 4, ... and all cores
  std::string modes = "abc";
  int repeats = 7;  // timed steps per figure; the median is reported
  int warmup = 2;
  std::string isa;     // "", "scalar", "avx2" or "avx512": caps the kernel's variant
  std::string cpuset;  // hwloc list ("0-15,32-47"): bind thread i to its i-th CPU
  std::string json_path;
};

// Adds --sizes, --threads, --modes, --repeats, --warmup, --isa, --cpuset and --json to `app`.
void AddAdamBenchOptions(CLI::App& app, AdamBenchOptions& options);

struct AdamBenchFigure {
  double median_seconds = 0;
  double gparams_per_second = 0;
  double gbytes_per_second = 0;  // the mode's logical bytes per parameter times the rate
  std::vector<double> samples_seconds;
};

struct AdamBenchRow {
  size_t size = 0;
  int threads = 0;
  char mode = 'a';
  double bytes_per_param = 0;
  AdamBenchFigure kernel, roofline, baseline;
  double roofline_fraction = 0;  // kernel rate / probe rate, paired by repeat
  double speedup = 0;            // kernel rate / baseline rate, paired by repeat
  double check_max_relative_error = 0;
  size_t check_copy_mismatches = 0;
  bool check_passed = false;
};

struct AdamBenchReport {
  nlohmann::json machine;
  nlohmann::json settings;
  std::vector<AdamBenchRow> rows;
  nlohmann::json target;  // the target, evaluated at the largest size and thread count
};

Result<AdamBenchReport> RunAdamBench(const AdamBenchOptions& options);

std::string FormatAdamBenchTable(const AdamBenchReport& report);
nlohmann::json AdamBenchJson(const AdamBenchReport& report);

// Runs, prints the table, writes --json if asked. Fails when a correctness check failed.
Status RunAdamBenchCommand(const AdamBenchOptions& options);

}  // namespace sluice::bench
