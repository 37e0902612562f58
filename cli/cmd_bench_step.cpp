// `sluice bench step --config FILE [--config FILE ...] [--set k=v] [--steps N] [--warmup N]
// [--json FILE] [--trace FILE]`: time per phase of a training step, the same code as
// benchmarks/bench_step.
#include <memory>

#include "benchmarks/lib/step_bench.h"
#include "cli/command_registry.h"

namespace sluice::cli {
namespace {

void AddBenchStepCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::StepBenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "step", "Training step: time per phase, overlap efficiency, Perfetto trace (bench_step)");
  bench::AddStepBenchOptions(*cmd, *options);
  cmd->callback([options] { ExitOnError(bench::RunStepBenchCommand(*options)); });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchStepCommand);

}  // namespace
}  // namespace sluice::cli
