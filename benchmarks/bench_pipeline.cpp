// bench_pipeline: pipeline schedules' bubbles on real ranks against the timeline simulator with
// measured costs and the closed forms; run it under mpirun. See benchmarks/lib/pipeline_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/pipeline_bench.h"

int main(int argc, char** argv) {
  CLI::App app("Pipeline bubbles: executor steps vs simulated timeline vs theory",
               "bench_pipeline");
  sluice::bench::PipelineBenchOptions options;
  sluice::bench::AddPipelineBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunPipelineBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
