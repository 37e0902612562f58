// bench_offload_adam: the offloaded optimizer with its state on NVMe, pipelined against the
// serial order; see benchmarks/lib/offload_adam_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/offload_adam_bench.h"

int main(int argc, char** argv) {
  CLI::App app("Offloaded Adam on NVMe: pipelined tiles vs the serial order", "bench_offload_adam");
  sluice::bench::OffloadAdamBenchOptions options;
  sluice::bench::AddOffloadAdamBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunOffloadAdamBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
