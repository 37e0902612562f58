// `sluice bench aio --dir DIR [--size 512M] [--json FILE]`: the NVMe I/O benchmark, the same
// code as benchmarks/bench_aio. `sluice bench aio --tune DIR [--output FILE]` runs a short sweep
// in DIR and writes the best `aio` settings as a YAML config layer that `sluice train` takes as
// it is: `sluice train --config base.yaml --config aio_tuned.yaml`.
#include <memory>

#include "benchmarks/lib/aio_bench.h"
#include "cli/command_registry.h"

namespace sluice::cli {
namespace {

void AddBenchAioCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::AioBenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "aio",
      "NVMe I/O: io_uring engine vs pread/pwrite vs fio; --tune DIR writes the best `aio` "
      "settings as a config layer");
  bench::AddAioBenchOptions(*cmd, *options);
  cmd->callback([options] { ExitOnError(bench::RunAioBenchCommand(*options)); });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchAioCommand);

}  // namespace
}  // namespace sluice::cli
