// bench_aio: the io_uring NVMe engine against synchronous pread/pwrite and fio, plus the cost of
// swap-store checksums. The same code runs as `sluice bench aio`; see benchmarks/lib/aio_bench.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "benchmarks/lib/aio_bench.h"

int main(int argc, char** argv) {
  CLI::App app("NVMe I/O: io_uring engine vs pread/pwrite vs fio, and checksum cost", "bench_aio");
  sluice::bench::AioBenchOptions options;
  sluice::bench::AddAioBenchOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  sluice::Status status = sluice::bench::RunAioBenchCommand(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
