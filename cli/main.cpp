#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/build_info.h"
#include "cli/command_registry.h"
#include "cli/did_you_mean.h"

namespace sluice::cli {
namespace {

std::vector<std::pair<std::string, CommandFactory>>& Registry() {
  static std::vector<std::pair<std::string, CommandFactory>> registry;
  return registry;
}

}  // namespace

CommandRegistration::CommandRegistration(const char* parent, CommandFactory factory) {
  Registry().emplace_back(parent, factory);
}

void AddRegisteredCommands(CLI::App& app) {
  std::map<std::string, CLI::App*> groups = {{"", &app}};
  groups["bench"] = app.add_subcommand("bench", "Benchmarks: adam, aio, step, kernels, gemm, comm");
  groups["config"] = app.add_subcommand("config", "Config files: check, help");
  for (auto& [name, group] : groups) {
    if (!name.empty()) group->require_subcommand(1);
  }
  for (const auto& [parent, factory] : Registry()) {
    auto it = groups.find(parent);
    if (it == groups.end()) {
      std::fprintf(stderr, "sluice: command registered under unknown group '%s'\n", parent.c_str());
      continue;
    }
    factory(*it->second);
  }
}

void ExitOnError(const Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  throw CLI::RuntimeError(1);
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
  CLI::App app("Sluice: ZeRO-3 training with CPU and NVMe offload, in C++", "sluice");
  app.require_subcommand(1);
  app.set_version_flag("--version", sluice::cli::VersionText,
                       "Print the version and the build's options (CUDA, NCCL, cuDNN, oneDNN, "
                       "kernel ISA, GEMM and BLAS), and exit");
  sluice::cli::AddRegisteredCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // An unknown command or flag gets the nearest registered name (did_you_mean.h).
    return sluice::cli::ReportParseError(app, error);
  }
  return 0;
}
