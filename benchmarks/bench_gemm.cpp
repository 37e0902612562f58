// bench_gemm: the training step's GEMM products through GemmFixed, OpenBLAS and (where built)
// oneDNN, in one run on the same buffers. The same code runs as `sluice bench gemm`; see
// benchmarks/lib/cpu_gemm_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/cpu_gemm_bench.h"

int main(int argc, char** argv) {
  CLI::App app("CPU GEMM: GemmFixed vs OpenBLAS vs oneDNN at the training step's shapes",
               "bench_gemm");
  sluice::bench::GemmBenchOptions options;
  sluice::bench::AddGemmBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunGemmBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
