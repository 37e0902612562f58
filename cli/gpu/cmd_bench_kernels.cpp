// `sluice bench kernels [--ops ...] [--models ...] [--repeats N] [--warmup N] [--quick] [--list]
// [--device N] [--json FILE]`: the CUDA kernel benchmark, the same code as
// benchmarks/bench_kernels. Compiled into `sluice` only with CUDA (cli/CMakeLists.txt); the build
// without it answers through cmd_bench_kernels_nocuda.cpp.
#include <memory>

#include "benchmarks/lib/gpu/kernels_bench.h"
#include "cli/command_registry.h"

namespace sluice::cli {
namespace {

void AddBenchKernelsCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::KernelBenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "kernels",
      "CUDA kernels at Llama 1B/7B shapes vs same-run cuBLAS peak and copy bandwidth "
      "(bench_kernels)");
  bench::AddKernelBenchOptions(*cmd, *options);
  cmd->callback([options] { ExitOnError(bench::RunKernelBenchCommand(*options)); });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchKernelsCommand);

}  // namespace
}  // namespace sluice::cli
