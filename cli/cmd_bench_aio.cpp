// `sluice bench aio --dir DIR [--size 512M] [--json FILE]`: the NVMe I/O benchmark, the same
// code as benchmarks/bench_aio. `sluice bench aio --tune DIR [--out FILE]` prints the best `aio`
// config section for DIR's filesystem.
#include <memory>

#include "benchmarks/lib/aio_bench.h"
#include "cli/command_registry.h"

namespace sluice::cli {
namespace {

void AddBenchAioCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::AioBenchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "aio", "NVMe I/O: io_uring engine vs pread/pwrite vs fio; --tune DIR picks `aio` settings");
  bench::AddAioBenchOptions(*cmd, *options);
  cmd->callback([options] { ExitOnError(bench::RunAioBenchCommand(*options)); });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchAioCommand);

}  // namespace
}  // namespace sluice::cli
