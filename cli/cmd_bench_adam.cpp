// `sluice bench adam [--sizes ...] [--threads ...] [--modes abc] [--repeats N] [--json FILE]`:
// the CPU Adam benchmark, the same code as benchmarks/bench_cpu_adam.
#include <memory>

#include "benchmarks/lib/adam_bench.h"
#include "cli/command_registry.h"

namespace sluice::cli {
namespace {

void AddBenchAdamCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::AdamBenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "adam", "CPU Adam: fused kernel vs memory roofline vs scalar baseline (bench_cpu_adam)");
  bench::AddAdamBenchOptions(*cmd, *options);
  cmd->callback([options] { ExitOnError(bench::RunAdamBenchCommand(*options)); });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchAdamCommand);

}  // namespace
}  // namespace sluice::cli
