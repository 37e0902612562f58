// `sluice bench kernels` in a build without CUDA: the command exists, so that scripts get a
// reason instead of "unknown command", and fails with it whatever its arguments.
#include "cli/command_registry.h"

namespace sluice::cli {
namespace {

void AddBenchKernelsCommand(CLI::App& parent) {
  CLI::App* cmd = parent.add_subcommand(
      "kernels", "CUDA kernel benchmark (unavailable: this sluice was built without CUDA)");
  cmd->allow_extras();
  cmd->callback([] {
    ExitOnError(UnavailableError(
        "`sluice bench kernels` needs CUDA, and this sluice binary was built without it (no "
        "nvcc when configured); rebuild on a machine with the CUDA toolkit"));
  });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchKernelsCommand);

}  // namespace
}  // namespace sluice::cli
