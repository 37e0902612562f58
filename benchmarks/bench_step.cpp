// bench_step: time per phase of a training step and overlap efficiency; see
// benchmarks/lib/step_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/step_bench.h"

int main(int argc, char** argv) {
  CLI::App app("Training step: time per phase, overlap efficiency, Perfetto trace", "bench_step");
  sluice::bench::StepBenchOptions options;
  sluice::bench::AddStepBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunStepBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
