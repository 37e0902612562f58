// bench_comm: all_reduce, all_gather, reduce_scatter and broadcast over MPI (and NCCL on GPUs)
// with nccl-tests' columns; run it under mpirun. The same code runs as `sluice bench comm`; see
// benchmarks/lib/comm_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/comm_bench.h"

int main(int argc, char** argv) {
  CLI::App app(
      "Collectives: all_reduce, all_gather, reduce_scatter, broadcast (nccl-tests' columns)",
      "bench_comm");
  sluice::bench::CommBenchOptions options;
  sluice::bench::AddCommBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunCommBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
