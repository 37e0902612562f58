// `sluice bench comm [-b 8] [-e 32M] [-f 2] [-n 20] [-w 5] [-c 1] [-d float] [-o sum] [-r 0]
// [--collectives ...] [--backends mpi,nccl] [--json FILE]`: the collectives benchmark with
// nccl-tests' columns, the same code as benchmarks/bench_comm; run it on N ranks with
// `sluice launch -n N -- bench comm`.
#include <memory>

#include "benchmarks/lib/comm_bench.h"
#include "cli/command_registry.h"
#include "cli/rank_placement.h"
#include "runtime/comm/comm_factory.h"

namespace sluice::cli {
namespace {

Status RunBenchComm(const bench::CommBenchOptions& options) {
  // A world that is not the one the launcher started would measure nothing useful.
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Comm> world, CreateWorldComm());
  SLUICE_RETURN_IF_ERROR(CheckWorldAgainstLauncher(world->rank(), world->size()));
  return bench::RunCommBenchCommand(options);
}

void AddBenchCommCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::CommBenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "comm",
      "Collectives over MPI (and NCCL on GPUs) with nccl-tests' columns: size, count, type, "
      "redop, root, time, algbw, busbw, #wrong (bench_comm; run under sluice launch)");
  bench::AddCommBenchOptions(*cmd, *options);
  cmd->callback([options] { ExitOnError(RunBenchComm(*options)); });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchCommCommand);

}  // namespace
}  // namespace sluice::cli
