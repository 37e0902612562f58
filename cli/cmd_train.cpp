// `sluice train --config FILE [--model FILE] [--set key=value ...] [--run-dir DIR]
// [--resume [DIR|latest] [--allow-config-change]] [--overwrite]` trains on
// every rank of its MPI world (`mpirun -np N sluice train ...` or `sluice launch -n N -- train
// ...`; one rank without mpirun) and writes DIR/config.resolved.json, DIR/metrics.jsonl and
// DIR/summary.json from rank 0 (and checkpoints with checkpoint.save_interval); `--resume`
// continues from one; `sluice train --help-config` lists every setting.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/rank_placement.h"
#include "cli/train_dry_run.h"
#include "engine/config/config.h"
#include "engine/train/run_setup.h"
#include "engine/train/trainer.h"
#include "runtime/comm/comm_factory.h"
#include "runtime/job_abort.h"
#include "runtime/logging.h"
#include "runtime/stop_signal.h"

namespace sluice::cli {
namespace {

struct TrainOptions {
  std::vector<std::string> config;  // --config files, layered in order
  std::string model;
  std::vector<std::string> set_overrides;
  std::string run_dir;
  bool help_config = false;
  std::string progress = "auto";
  std::optional<std::string> resume;  // "latest" or a checkpoint path
  bool allow_config_change = false;
  bool overwrite = false;
  bool dry_run = false;
  int dry_run_ranks = 0;  // --ranks: the world --dry-run plans for (0: the launcher's)
};

// Ranks other than 0 print errors only: rank 0 speaks for the run.
Status SetLogLevel(const Comm& world, const std::string& level) {
  if (std::getenv("SLUICE_LOG") != nullptr) return OkStatus();
  return SetLogSpec(world.rank() == 0 ? level : std::string("error"));
}

Result<train::TrainSummary> Train(const TrainOptions& options, Comm& world) {
  ConfigSources sources;
  sources.paths = options.config;
  sources.model_path = options.model;
  sources.set_overrides = options.set_overrides;
  // --run-dir is a --set of run.dir, so config.resolved.json records where the run went.
  if (!options.run_dir.empty()) sources.set_overrides.push_back("run.dir=" + options.run_dir);
  // The batch keys resolve for the ranks of this run.
  sources.world_size = world.size();
  SLUICE_ASSIGN_OR_RETURN(Config config, train::LoadTrainConfig(sources));
  SLUICE_RETURN_IF_ERROR(SetLogLevel(world, config.run.log_level));
  world.SetTimeout(config.run.comm_timeout_s);

  train::TrainerOptions trainer_options;
  trainer_options.progress = options.progress == "bar"     ? train::ProgressMode::kBar
                             : options.progress == "plain" ? train::ProgressMode::kPlain
                             : options.progress == "off"   ? train::ProgressMode::kOff
                                                           : train::ProgressMode::kAuto;
  trainer_options.world = &world;
  trainer_options.resume = options.resume;
  trainer_options.allow_config_change = options.allow_config_change;
  trainer_options.overwrite = options.overwrite;
  trainer_options.stop_on_signal = true;
  SLUICE_ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(config, trainer_options));
  return trainer->Run();
}

// The exit code: 0, or 128 + the signal the run stopped early for (as a shell reports a process
// the signal ended, so that schedulers see the run did not finish).
Result<int> RunTrain(const TrainOptions& options) {
  if (options.help_config) {
    std::printf("%s", HelpConfigText().c_str());
    return 0;
  }
  if (options.config.empty()) {
    return InvalidArgumentError(
        "--config FILE is required (a YAML or JSON config; a DeepSpeed ds_config.json works "
        "with --model FILE for the model)");
  }
  if (options.dry_run) {
    ConfigSources sources;
    sources.paths = options.config;
    sources.model_path = options.model;
    sources.set_overrides = options.set_overrides;
    if (!options.run_dir.empty()) sources.set_overrides.push_back("run.dir=" + options.run_dir);
    SLUICE_RETURN_IF_ERROR(
        DryRunTrain(sources, options.dry_run_ranks, options.resume, options.overwrite));
    return 0;
  }
  // Before the config: its notes and errors are then printed by rank 0 only or rank-tagged.
  InstallStopSignalHandlers();
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Comm> world, CreateWorldComm());
  // srun without an MPI plugin makes every task a world of one (rank_placement.h).
  SLUICE_RETURN_IF_ERROR(CheckWorldAgainstLauncher(world->rank(), world->size()));
  SLUICE_RETURN_IF_ERROR(SetLogLevel(*world, "info"));
  // A rank that cannot continue ends the whole job, so that no rank is left waiting for it.
  if (world->size() > 1) EnableJobAbortOnCommTimeout();
  Result<train::TrainSummary> summary = Train(options, *world);
  Status status = summary.status();
  if (world->size() > 1) {
    if (!status.ok())
      status.WithContext(fmt::format("rank {} of {}", world->rank(), world->size()));
    status = FinishRankCommand(std::move(status), world->timeout_seconds());
  }
  SLUICE_RETURN_IF_ERROR(status);
  return summary->stop_signal == 0 ? 0 : 128 + summary->stop_signal;
}

void AddTrainCommand(CLI::App& parent) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = parent.add_subcommand("train",
                                        "Train a model with ZeRO on the CPU device or a GPU, on "
                                        "every MPI rank (mpirun or sluice launch; one "
                                        "rank without); writes metrics.jsonl and a summary");
  cmd->add_option("--config", options->config,
                  "Config file (.yaml, .yml or .json; DeepSpeed keys plus model/data/device/run); "
                  "repeatable: later files win key by key (e.g. --config base.yaml --config "
                  "aio_tuned.yaml)")
      ->allow_extra_args(false);
  cmd->add_option("--model", options->model,
                  "File with the model section (a bare model map, or a `model:` map with other "
                  "sections beside it), layered over the config files; lets a plain DeepSpeed "
                  "ds_config.json be used as it is");
  cmd->add_option("--set", options->set_overrides,
                  "Override a setting: key=value (e.g. run.steps=50); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--run-dir", options->run_dir, "Output folder (overrides run.dir)");
  cmd->add_option("--progress", options->progress,
                  "Progress display: auto (a bar on a terminal, plain lines otherwise), bar, "
                  "plain, off")
      ->check(CLI::IsMember({"auto", "bar", "plain", "off"}));
  auto resume = std::make_shared<std::string>();
  CLI::Option* resume_option =
      cmd->add_option("--resume", *resume,
                      "Continue from a checkpoint: latest (the default: the newest in "
                      "checkpoint.dir, RUN_DIR/checkpoints), or a step, checkpoints or run "
                      "directory of any world size and ZeRO stage")
          ->expected(0, 1)
          ->type_name("[DIR|latest]");
  cmd->add_flag("--allow-config-change", options->allow_config_change,
                "With --resume: continue even though settings that decide the training "
                "trajectory (optimizer, scheduler, global batch, precision, model, data, seeds) "
                "or the training data differ from the checkpoint's (each is named in a warning); "
                "without it such a resume is refused");
  cmd->add_flag("--overwrite", options->overwrite,
                "Start a new run in a run directory that holds another run's checkpoints, "
                "deleting them (without it such a run is refused; --resume continues that run)");
  cmd->add_flag("--dry-run", options->dry_run,
                "Resolve the config, estimate the memory, run the pre-flight checks (budgets, "
                "model, data, run directory), print the plan and exit, writing nothing");
  cmd->add_option("--ranks", options->dry_run_ranks,
                  "With --dry-run: plan for N ranks (default: the launcher's world, else 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--help-config", options->help_config,
                "List every config setting with its type, default and meaning, and exit");
  cmd->callback([options, resume, resume_option] {
    if (resume_option->count() > 0) options->resume = resume->empty() ? "latest" : *resume;
    Result<int> exit_code = RunTrain(*options);
    ExitOnError(exit_code.status());
    if (*exit_code != 0) throw CLI::RuntimeError(*exit_code);
  });
}

SLUICE_REGISTER_COMMAND("", AddTrainCommand);

}  // namespace
}  // namespace sluice::cli
