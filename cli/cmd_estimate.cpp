// `sluice estimate --config FILE [--config FILE ...] [--model FILE] [--ranks N] [--json]`: the
// memory one rank needs per tier and category for the configured model (the config files layered
// in order), ZeRO stage and offload (engine/estimate), as a
// table with the formula of every line or as a JSON record; whether it fits device.memory_limit,
// device.host_memory_limit and the NVMe swap space, what to change when it does not, and the same
// model under ZeRO stages 0-3.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "engine/config/config.h"
#include "runtime/json_text.h"
#include "engine/estimate/estimate_fit.h"
#include "engine/estimate/estimate_report.h"
#include "engine/estimate/memory_estimate.h"

namespace sluice::cli {
namespace {

struct EstimateCommandOptions {
  std::vector<std::string> configs;  // layered in order
  std::string model;
  std::vector<std::string> set_overrides;
  int ranks = 1;
  bool json = false;
  bool activation_checkpointing = false;
};

Status RunEstimate(const EstimateCommandOptions& options) {
  ConfigSources sources;
  sources.paths = options.configs;
  sources.model_path = options.model;
  sources.set_overrides = options.set_overrides;
  sources.world_size = options.ranks;  // DeepSpeed's batch-size inference depends on it
  SLUICE_ASSIGN_OR_RETURN(Config config, LoadConfig(sources));

  estimate::EstimateOptions estimate_options;
  estimate_options.activation_checkpointing = options.activation_checkpointing;
  estimate::EstimateReport report;
  report.config = &config;
  SLUICE_ASSIGN_OR_RETURN(report.estimate,
                          estimate::EstimateMemory(config, options.ranks, estimate_options));
  report.fit = estimate::CheckFit(config, report.estimate);
  if (!report.fit.fits()) {
    report.alternatives =
        estimate::FindAlternatives(config, options.ranks, estimate_options, report.fit);
  }
  SLUICE_ASSIGN_OR_RETURN(report.stages,
                          estimate::CompareStages(config, options.ranks, estimate_options));

  if (options.json) {
    std::printf("%s\n", JsonText(estimate::EstimateJson(report), 2).c_str());
  } else {
    std::printf("%s", estimate::FormatEstimateText(report).c_str());
  }
  return OkStatus();
}

void AddEstimateCommand(CLI::App& parent) {
  auto options = std::make_shared<EstimateCommandOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "estimate",
      "Memory per rank by tier and category for a config's model, ZeRO stage and offload, and "
      "whether it fits");
  cmd->add_option("--config", options->configs,
                  "Config file (.yaml, .yml or .json; a DeepSpeed ds_config.json works with "
                  "--model); repeatable: later files win key by key")
      ->required()
      ->allow_extra_args(false);
  cmd->add_option("--model", options->model,
                  "File with the model section (a bare model map, or a `model:` map with any "
                  "other sections beside it), layered over the config files");
  cmd->add_option("--ranks,-n", options->ranks, "Data-parallel ranks to estimate for")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--set", options->set_overrides,
                  "Override a setting: key=value (e.g. zero_optimization.stage=3); repeatable")
      ->allow_extra_args(false);
  cmd->add_flag("--activation-checkpointing", options->activation_checkpointing,
                "Estimate with every decoder block checkpointed");
  cmd->add_flag("--json", options->json, "Print a JSON record instead of the tables");
  cmd->callback([options] { ExitOnError(RunEstimate(*options)); });
}

SLUICE_REGISTER_COMMAND("", AddEstimateCommand);

}  // namespace
}  // namespace sluice::cli
