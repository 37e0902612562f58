// `sluice config check FILE... | --config FILE... [--model FILE] [--set key=value ...]
// [--world-size N] [--json] [--all]` and `sluice config help [--markdown]`. Several files are
// layered in order, a later file winning key by key; the listing names the file each value came
// from. --all lists every key Sluice will not run instead of stopping at the first.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "engine/config/config.h"

namespace sluice::cli {
namespace {

struct CheckOptions {
  std::vector<std::string> files;    // positional
  std::vector<std::string> configs;  // --config
  std::string model;
  std::vector<std::string> set_overrides;
  int world_size = 1;
  bool json = false;
  bool all = false;
};

// --all: every problem, one per line, then exit 1; a clean config is printed as without --all.
Config CheckAll(const ConfigSources& sources) {
  Result<ConfigCheckReport> report = CheckConfigAll(sources);
  ExitOnError(report.status());
  if (report->problems.empty()) return std::move(*report->config);
  std::fprintf(stderr, "%zu setting%s Sluice will not run as given:\n", report->problems.size(),
               report->problems.size() == 1 ? "" : "s");
  for (const Status& problem : report->problems) {
    std::fprintf(stderr, "error: %s\n", problem.ToString().c_str());
  }
  throw CLI::RuntimeError(1);
}

void RunCheck(const CheckOptions& options) {
  if (!options.files.empty() && !options.configs.empty()) {
    // Their relative order is lost on the command line, and the order is the layering.
    ExitOnError(InvalidArgumentError(
        "give the config files either as arguments or with --config, not both: their order is "
        "the layering order"));
  }
  if (options.files.empty() && options.configs.empty()) {
    ExitOnError(InvalidArgumentError("give a config file: sluice config check FILE [FILE ...]"));
  }
  ConfigSources sources;
  sources.paths = options.files.empty() ? options.configs : options.files;
  sources.model_path = options.model;
  sources.set_overrides = options.set_overrides;
  sources.world_size = options.world_size;
  Result<Config> config = options.all ? Result<Config>(CheckAll(sources)) : LoadConfig(sources);
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
      "check",
      "Resolve config files (YAML or JSON, DeepSpeed keys; later files win key by key) and "
      "print the result with where each value came from, or the error");
  cmd->add_option("files", options->files, "Config files (.yaml, .yml or .json), layered in order");
  cmd->add_option("--config", options->configs,
                  "Config file; repeatable, layered in order (as sluice train --config)")
      ->allow_extra_args(false);
  cmd->add_option("--model", options->model,
                  "File with the model section (as sluice train --model), the last layer");
  cmd->add_option("--set", options->set_overrides,
                  "Override a setting: key=value (e.g. zero_optimization.stage=3); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--world-size", options->world_size,
                  "Data-parallel world size for the batch-size rule")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", options->json, "Print the config record as JSON");
  cmd->add_flag("--all", options->all,
                "List every key Sluice will not run (unknown, unsupported, invalid) at once, for "
                "migrating a DeepSpeed config, instead of stopping at the first");
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
