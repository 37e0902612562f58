// bench_kernels: every CUDA kernel at Llama 1B and 7B shapes against the cuBLAS GEMM peak and
// the device copy bandwidth measured in the same run. Built only with CUDA; the same code runs
// as `sluice bench kernels`; see benchmarks/lib/gpu/kernels_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/gpu/kernels_bench.h"

int main(int argc, char** argv) {
  CLI::App app("CUDA kernels vs same-run rooflines (cuBLAS GEMM peak, device copy bandwidth)",
               "bench_kernels");
  sluice::bench::KernelBenchOptions options;
  sluice::bench::AddKernelBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunKernelBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
