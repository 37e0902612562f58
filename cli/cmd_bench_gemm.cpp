// `sluice bench gemm [--shapes demo,gpt2,square] [--backends ...] [--threads N] [--repeats N]
// [--isa ...] [--json FILE]`: the CPU GEMM benchmark, the same code as benchmarks/bench_gemm.
#include <memory>

#include "benchmarks/lib/cpu_gemm_bench.h"
#include "cli/command_registry.h"

namespace sluice::cli {
namespace {

void AddBenchGemmCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::GemmBenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "gemm",
      "CPU GEMM: GemmFixed vs OpenBLAS vs oneDNN at the training step's shapes (bench_gemm)");
  bench::AddGemmBenchOptions(*cmd, *options);
  cmd->callback([options] { ExitOnError(bench::RunGemmBenchCommand(*options)); });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchGemmCommand);

}  // namespace
}  // namespace sluice::cli
