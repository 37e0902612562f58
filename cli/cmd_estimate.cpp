// `sluice estimate --config FILE [--config FILE ...] [--model FILE] [--ranks N] [--json]`: the
// memory one rank needs per tier and category for the configured model (the config files layered
// in order), ZeRO stage and offload (engine/estimate), as a
// table with the formula of every line or as a JSON record; whether it fits device.memory_limit,
// device.host_memory_limit and the NVMe swap space, what to change when it does not, and the same
// model under ZeRO stages 0-3.
//
// Pipelines: with pipeline.stages above 1 in the config, or --pipeline-stages N, the model is
// partitioned into N stages (--partition-method), the schedule (--schedule, --micro-batches,
// --chunks) is simulated and drawn, and every stage is estimated (pipeline_estimate.h). The tables
// after the per-stage one are the largest stage's.
//
// Tensor parallelism: with tensor_parallel.autotp_size above 1 in the config, or
// --tensor-parallel T, each rank holds tensor rank 0's pieces of the model (the largest) and its
// share of the activations (memory_estimate.h). --ranks is the whole world, data x tensor x
// pipeline; the headline shows the grid.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/command_registry.h"
#include "cli/estimate_pipeline_stages.h"
#include "engine/config/config.h"
#include "engine/config/config_layers.h"
#include "engine/estimate/estimate_fit.h"
#include "engine/estimate/estimate_report.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/estimate/pipeline_estimate.h"
#include "runtime/json_text.h"

extern char** environ;

namespace sluice::cli {
namespace {

struct EstimateCommandOptions {
  std::vector<std::string> configs;  // layered in order
  std::string model;
  std::vector<std::string> set_overrides;
  int ranks = 0;  // 0: not given (one per pipeline stage)
  bool json = false;
  bool activation_checkpointing = false;
  int pipeline_stages = 0;            // 0: the config's pipeline.stages
  int tensor_parallel = 0;            // 0: the config's tensor_parallel.autotp_size
  std::string schedule;               // "": the config's pipeline.schedule
  int micro_batches = 0;              // 0: gradient_accumulation_steps
  int chunks = 0;                     // 0: the config's pipeline.chunks, or 2 for interleaved-1f1b
  std::string partition_method;       // "": the config's pipeline.partition_method
  bool pipeline_flags_given = false;  // --schedule, --micro-batches, --chunks, --partition-method
};

std::vector<std::pair<std::string, std::string>> EnvironmentPairs() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view item(*p);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return env;
}

// "--tensor-parallel 2 x --pipeline-stages 2" or "4 pipeline stages ...": how the model-parallel
// sizes were given, for the --ranks message.
std::string ModelParallelText(int tensor, const std::string& tensor_key, int stages,
                              const std::string& stages_key) {
  if (tensor == 1) return fmt::format("the {} pipeline stages ({})", stages, stages_key);
  if (stages == 1) return fmt::format("the {} tensor-parallel ranks ({})", tensor, tensor_key);
  return fmt::format("{} tensor-parallel ranks ({}) x {} pipeline stages ({})", tensor, tensor_key,
                     stages, stages_key);
}

Status PrintReport(const estimate::EstimateReport& report,
                   const estimate::PipelineEstimate* pipeline, bool json) {
  if (json) {
    nlohmann::ordered_json record = estimate::EstimateJson(report);
    if (pipeline != nullptr) record["pipeline"] = estimate::PipelineJson(*pipeline);
    std::printf("%s\n", JsonText(record, 2).c_str());
    return OkStatus();
  }
  if (pipeline != nullptr) {
    std::printf("%s\n", estimate::FormatPipelineText(*report.config, *pipeline).c_str());
  }
  std::printf("%s", estimate::FormatEstimateText(report).c_str());
  return OkStatus();
}

Status RunEstimate(const EstimateCommandOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<ConfigLayer> layers,
                          ReadConfigLayers(options.configs, options.model));
  ConfigSources sources;
  sources.env = EnvironmentPairs();
  sources.set_overrides = options.set_overrides;
  // The trainer refuses pipeline.stages > 1; the estimate takes it out and loads the rest.
  SLUICE_ASSIGN_OR_RETURN(PipelineStagesSetting setting,
                          TakePipelineStages(&layers, &*sources.env, &sources.set_overrides));
  const bool from_flag = options.pipeline_stages > 0;
  const int stages = from_flag ? options.pipeline_stages : setting.stages;
  const std::string stages_key = from_flag ? std::string("--pipeline-stages")
                                           : fmt::format("pipeline.stages ({})", setting.origin);
  if (stages == 1 && options.pipeline_flags_given) {
    return InvalidArgumentError(
        "--schedule, --micro-batches, --chunks and --partition-method describe a pipeline: give "
        "--pipeline-stages N (N > 1) or pipeline.stages in the config");
  }
  // The loader judges tensor_parallel.autotp_size against the world it is given; the estimate
  // takes it out too and applies the size to the loaded config.
  SLUICE_ASSIGN_OR_RETURN(PipelineStagesSetting tensor_setting,
                          TakeTensorParallelSize(&layers, &*sources.env, &sources.set_overrides));
  const bool tensor_from_flag = options.tensor_parallel > 0;
  const int tensor = tensor_from_flag ? options.tensor_parallel : tensor_setting.stages;
  const std::string tensor_key =
      tensor_from_flag ? std::string("--tensor-parallel")
                       : fmt::format("tensor_parallel.autotp_size ({})", tensor_setting.origin);
  const int model_parallel = stages * tensor;
  const int ranks = options.ranks > 0 ? options.ranks : model_parallel;
  if (ranks % model_parallel != 0) {
    return InvalidArgumentError(
        "--ranks {} is not a multiple of {}: the world is data-parallel x tensor-parallel x "
        "pipeline ranks; use --ranks {}",
        ranks, ModelParallelText(tensor, tensor_key, stages, stages_key),
        (ranks / model_parallel + 1) * model_parallel);
  }
  const int data_parallel = ranks / model_parallel;
  // DeepSpeed's batch-size inference counts the data-parallel ranks.
  sources.world_size = data_parallel;
  SLUICE_ASSIGN_OR_RETURN(Config config, LoadConfigFromLayers(layers, sources));
  config.parallel.tensor = tensor;
  config.world_size = ranks;
  config.dp_world_size = data_parallel;

  estimate::EstimateOptions estimate_options;
  estimate_options.activation_checkpointing = options.activation_checkpointing;
  estimate::EstimateReport report;
  report.config = &config;
  report.pipeline_stages = stages;
  std::unique_ptr<estimate::PipelineEstimate> pipeline;
  if (stages == 1) {
    SLUICE_ASSIGN_OR_RETURN(report.estimate,
                            estimate::EstimateMemory(config, data_parallel, estimate_options));
    report.fit = estimate::CheckFit(config, report.estimate);
  } else {
    // The config's pipeline, the flags given over it.
    SLUICE_ASSIGN_OR_RETURN(estimate::PipelineEstimateOptions pipeline_options,
                            estimate::PipelineOptionsOf(config));
    pipeline_options.stages = stages;
    pipeline_options.stages_key = stages_key;
    if (!options.schedule.empty()) {
      SLUICE_ASSIGN_OR_RETURN(pipeline_options.schedule,
                              estimate::ParseScheduleKind(options.schedule, "--schedule"));
      pipeline_options.chunks = 0;  // the config's chunks go with the config's schedule
    }
    if (options.chunks > 0) pipeline_options.chunks = options.chunks;
    if (!options.partition_method.empty()) {
      SLUICE_ASSIGN_OR_RETURN(
          pipeline_options.partition,
          parallel::ParsePartitionMethod(options.partition_method, "--partition-method"));
    }
    pipeline_options.micro_batches = options.micro_batches;
    SLUICE_ASSIGN_OR_RETURN(
        estimate::PipelineEstimate p,
        estimate::EstimatePipeline(config, data_parallel, pipeline_options, estimate_options));
    pipeline = std::make_unique<estimate::PipelineEstimate>(std::move(p));
    // The largest stage's tables; its alternatives and ZeRO stages are that stage's.
    const estimate::StageEstimate& worst = pipeline->stages[pipeline->worst_stage];
    report.estimate = worst.estimate;
    report.fit = estimate::CheckPipelineFit(config, *pipeline);
    estimate_options.pipeline_stage = worst.shape;
  }
  if (!report.fit.fits()) {
    report.alternatives =
        estimate::FindAlternatives(config, data_parallel, estimate_options, report.fit);
  }
  SLUICE_ASSIGN_OR_RETURN(report.stages,
                          estimate::CompareStages(config, data_parallel, estimate_options));
  return PrintReport(report, pipeline.get(), options.json);
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
  cmd->add_option("--ranks,-n", options->ranks,
                  "Ranks to estimate for (the world: data-parallel x tensor-parallel x pipeline "
                  "ranks; default one data-parallel rank)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--set", options->set_overrides,
                  "Override a setting: key=value (e.g. zero_optimization.stage=3); repeatable")
      ->allow_extra_args(false);
  cmd->add_flag("--activation-checkpointing", options->activation_checkpointing,
                "Estimate with every decoder block checkpointed");
  cmd->add_flag("--json", options->json, "Print a JSON record instead of the tables");
  cmd->add_option("--pipeline-stages", options->pipeline_stages,
                  "Pipeline stages to partition the model's layers into (overrides "
                  "pipeline.stages); above 1 the estimate is per stage and shows the schedule")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tensor-parallel", options->tensor_parallel,
                  "Tensor-parallel ranks each layer is split across (overrides "
                  "tensor_parallel.autotp_size); the figures are then one tensor rank's")
      ->check(CLI::PositiveNumber);
  auto pipeline_flag = [options](CLI::Option* option) {
    option->each([options](const std::string&) { options->pipeline_flags_given = true; });
    return option;
  };
  pipeline_flag(cmd->add_option("--schedule", options->schedule,
                                "Pipeline schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1 "
                                "(default: the config's pipeline.schedule)"));
  pipeline_flag(cmd->add_option("--micro-batches", options->micro_batches,
                                "Micro-batches per step (default gradient_accumulation_steps)")
                    ->check(CLI::PositiveNumber));
  pipeline_flag(cmd->add_option("--chunks", options->chunks,
                                "Model chunks per stage for interleaved-1f1b (default: the "
                                "config's pipeline.chunks, or 2)")
                    ->check(CLI::PositiveNumber));
  pipeline_flag(cmd->add_option("--partition-method", options->partition_method,
                                "How layers are divided among stages: parameters (balance "
                                "parameter counts), uniform (layers evenly), type:<regex> "
                                "(balance the layer classes it matches) or time (balance "
                                "per-layer FLOPs here; training measures times); default: the "
                                "config's pipeline.partition_method"));
  cmd->callback([options] { ExitOnError(RunEstimate(*options)); });
}

SLUICE_REGISTER_COMMAND("", AddEstimateCommand);

}  // namespace
}  // namespace sluice::cli
