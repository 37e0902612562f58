// `sluice config check FILE [--set key=value ...] [--world-size N] [--json]` and
// `sluice config help [--markdown]`.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "engine/config/config.h"

namespace sluice::cli {
namespace {

struct CheckOptions {
  std::string file;
  std::vector<std::string> set_overrides;
  int world_size = 1;
  bool json = false;
};

void RunCheck(const CheckOptions& options) {
  ConfigSources sources;
  sources.path = options.file;
  sources.set_overrides = options.set_overrides;
  sources.world_size = options.world_size;
  Result<Config> config = LoadConfig(sources);
  ExitOnError(config.status());
  if (options.json) {
    std::printf("%s\n", ConfigRecordJson(*config).dump(2).c_str());
  } else {
    std::printf("%s", ConfigToText(*config).c_str());
  }
}

void AddCheckCommand(CLI::App& parent) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "check", "Resolve a config file (YAML or JSON, DeepSpeed keys) and print it, or the error");
  cmd->add_option("file", options->file, "Config file (.yaml, .yml or .json)")->required();
  cmd->add_option("--set", options->set_overrides,
                  "Override a setting: key=value (e.g. zero_optimization.stage=3); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--world-size", options->world_size,
                  "Data-parallel world size for the batch-size rule")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", options->json, "Print the config record as JSON");
  cmd->callback([options] { RunCheck(*options); });
}

void AddHelpCommand(CLI::App& parent) {
  auto markdown = std::make_shared<bool>(false);
  CLI::App* cmd =
      parent.add_subcommand("help", "List every config setting with its type, default and meaning");
  cmd->add_flag("--markdown", *markdown, "Print a Markdown table (docs/config.md)");
  cmd->callback([markdown] {
    std::printf("%s", *markdown ? HelpConfigMarkdown().c_str() : HelpConfigText().c_str());
  });
}

SLUICE_REGISTER_COMMAND("config", AddCheckCommand);
SLUICE_REGISTER_COMMAND("config", AddHelpCommand);

}  // namespace
}  // namespace sluice::cli
