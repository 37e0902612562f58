// bench_cpu_adam: the fused CPU Adam kernel against its memory roofline and a scalar baseline.
// The same code runs as `sluice bench adam`; see benchmarks/lib/adam_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/adam_bench.h"

int main(int argc, char** argv) {
  CLI::App app("CPU Adam: fused kernel vs memory roofline vs scalar baseline", "bench_cpu_adam");
  sluice::bench::AdamBenchOptions options;
  sluice::bench::AddAdamBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunAdamBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
