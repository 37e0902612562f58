// `sluice train --config FILE [--model FILE] [--set key=value ...] [--run-dir DIR]` trains on one
// rank and writes DIR/config.resolved.json, DIR/metrics.jsonl and DIR/summary.json;
// `sluice train --help-config` lists every setting.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "engine/config/config.h"
#include "engine/train/run_setup.h"
#include "engine/train/trainer.h"
#include "runtime/logging.h"

namespace sluice::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::string model;
  std::vector<std::string> set_overrides;
  std::string run_dir;
  bool help_config = false;
  std::string progress = "auto";
};

Status RunTrain(const TrainOptions& options) {
  if (options.help_config) {
    std::printf("%s", HelpConfigText().c_str());
    return OkStatus();
  }
  if (options.config.empty()) {
    return InvalidArgumentError(
        "--config FILE is required (a YAML or JSON config; a DeepSpeed ds_config.json works "
        "with --model FILE for the model)");
  }
  train::TrainConfigSources sources;
  sources.config_path = options.config;
  sources.model_path = options.model;
  sources.set_overrides = options.set_overrides;
  // --run-dir is a --set of run.dir, so config.resolved.json records where the run went.
  if (!options.run_dir.empty()) sources.set_overrides.push_back("run.dir=" + options.run_dir);
  SLUICE_ASSIGN_OR_RETURN(Config config, train::LoadTrainConfig(sources));
  if (std::getenv("SLUICE_LOG") == nullptr) {
    SLUICE_RETURN_IF_ERROR(SetLogSpec(config.run.log_level));
  }

  train::TrainerOptions trainer_options;
  trainer_options.progress = options.progress == "bar"     ? train::ProgressMode::kBar
                             : options.progress == "plain" ? train::ProgressMode::kPlain
                             : options.progress == "off"   ? train::ProgressMode::kOff
                                                           : train::ProgressMode::kAuto;
  SLUICE_ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(config, trainer_options));
  return trainer->Run().status();
}

void AddTrainCommand(CLI::App& parent) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "train", "Train a model on one rank (CPU device); writes metrics.jsonl and a summary");
  cmd->add_option("--config", options->config,
                  "Config file (.yaml, .yml or .json; DeepSpeed keys plus model/data/device/run)");
  cmd->add_option("--model", options->model,
                  "File with the model section (replaces the config's; lets a plain DeepSpeed "
                  "ds_config.json be used as it is)");
  cmd->add_option("--set", options->set_overrides,
                  "Override a setting: key=value (e.g. run.steps=50); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--run-dir", options->run_dir, "Output folder (overrides run.dir)");
  cmd->add_option("--progress", options->progress,
                  "Progress display: auto (a bar on a terminal, plain lines otherwise), bar, "
                  "plain, off")
      ->check(CLI::IsMember({"auto", "bar", "plain", "off"}));
  cmd->add_flag("--help-config", options->help_config,
                "List every config setting with its type, default and meaning, and exit");
  cmd->callback([options] { ExitOnError(RunTrain(*options)); });
}

SLUICE_REGISTER_COMMAND("", AddTrainCommand);

}  // namespace
}  // namespace sluice::cli
