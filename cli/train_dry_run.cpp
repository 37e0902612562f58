#include "cli/train_dry_run.h"

#include <fmt/format.h>

#include <filesystem>

#include "cli/rank_placement.h"
#include "engine/data/data_loader.h"
#include "engine/estimate/budget_guard.h"
#include "engine/estimate/estimate_fit.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/model/model_options.h"
#include "engine/parallel/process_grid.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/precision.h"
#include "engine/train/run_files.h"
#include "engine/train/run_setup.h"
#include "engine/train/train_world.h"
#include "runtime/size_format.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;

std::string Offload(OffloadDevice device, double ratio, bool ratio_auto) {
  if (device == OffloadDevice::kNone) return "none";
  std::string text(OffloadDeviceName(device));
  if (ratio_auto) return text + " (ratio auto)";
  if (ratio < 1.0) text += fmt::format(" (ratio {})", ratio);
  return text;
}

// What the run would do with its directory; nothing is created or claimed.
Result<std::string> DescribeRunDirectory(const Config& config, const DryRunRequest& request) {
  std::error_code ec;
  if (!fs::exists(config.run.dir, ec)) return fmt::format("{} (would be created)", config.run.dir);
  if (request.overwrite) {
    return fmt::format("{} (exists; --overwrite would delete another run's checkpoints there)",
                       config.run.dir);
  }
  // Without --overwrite the claim only reads: a directory holding another run is refused here as
  // the run would refuse it.
  SLUICE_RETURN_IF_ERROR(train::ClaimRunDirectory(
      config, {.write_files = true, .resume = request.resume, .overwrite = false}));
  return fmt::format("{} (exists{})", config.run.dir,
                     request.resume ? fmt::format("; resumes from {}", *request.resume) : "");
}

}  // namespace

Status RunTrainDryRun(const DryRunRequest& request, std::FILE* out) {
  const int ranks = request.sources.world_size;
  SLUICE_ASSIGN_OR_RETURN(Config config, train::LoadTrainConfig(request.sources));
  SLUICE_RETURN_IF_ERROR(train::FitBatchToWorld(config, ranks));
  SLUICE_ASSIGN_OR_RETURN(
      parallel::ProcessGrid grid,
      parallel::ProcessGrid::Create(ranks, config.parallel.tensor, config.parallel.pipeline));
  const int data_ranks = grid.shape().data;
  const int data_rank = grid.CoordsOf(request.rank).data;
  if (config.device.type == DeviceType::kCpu && !config.device.memory_limit.has_value()) {
    return InvalidArgumentError(
        "device.memory_limit is not set: the cpu device needs a capacity (e.g. 512MiB)");
  }
  // The run's own checks, in its order: budgets, the auto offload ratio, model, schedule, data.
  SLUICE_RETURN_IF_ERROR(estimate::CheckBudgetsBeforeAllocating(config, data_ranks));
  SLUICE_RETURN_IF_ERROR(estimate::ResolveAutoRatioBudget(&config, data_ranks));
  const train::Precision precision = train::PrecisionOf(config.model.dtype);
  SLUICE_ASSIGN_OR_RETURN(model::ModelOptions model,
                          train::ModelOptionsFromConfig(config, precision));
  SLUICE_RETURN_IF_ERROR(train::LrSchedule::Create(config.scheduler, config.optimizer.lr).status());
  Result<data::DataLoader> loader =
      data::DataLoader::Open(train::DataOptionsFromConfig(config), data_rank, data_ranks);
  if (!loader.ok()) return Status(loader.status()).WithContext("opening the training data");
  if (config.model.init_from.has_value() && !request.resume.has_value()) {
    std::error_code ec;
    if (!fs::exists(*config.model.init_from, ec)) {
      return NotFoundError("model.init_from {} does not exist", *config.model.init_from);
    }
  }
  SLUICE_ASSIGN_OR_RETURN(std::string run_dir, DescribeRunDirectory(config, request));
  SLUICE_ASSIGN_OR_RETURN(estimate::MemoryEstimate memory,
                          estimate::EstimateMemory(config, data_ranks, {}));
  const estimate::FitReport fit = estimate::CheckFit(config, memory);
  if (request.rank != 0) return OkStatus();

  const int64_t sequences =
      config.batch.micro_batch_per_gpu * config.batch.gradient_accumulation_steps * data_ranks;
  const int64_t tokens_per_step = sequences * config.model.seq_len;
  std::string text =
      "Dry run: the config resolves and every pre-flight check passes; nothing "
      "was trained or written.\n";
  auto line = [&text](std::string_view key, const std::string& value) {
    text += fmt::format("  {:<12}{}\n", key, value);
  };
  line("config", config.source_file.empty() ? "defaults" : config.source_file);
  line("ranks", fmt::format("{} ({}): {}", ranks, request.ranks_source, grid.shape().ToString()));
  line("model", fmt::format("{}; {} parameters, {}", train::DescribeModel(model),
                            model::CountParameters(model), train::PrecisionName(precision)));
  line("ZeRO", fmt::format("stage {}; offload optimizer {}, parameters {}", config.zero.stage,
                           Offload(config.zero.offload_optimizer.device,
                                   config.zero.offload_optimizer.ratio,
                                   config.zero.offload_optimizer.ratio_auto),
                           Offload(config.zero.offload_param.device, 1.0, false)));
  line("batch",
       fmt::format("{} sequences per step = micro-batch {} x accumulation {} x {} {}", sequences,
                   config.batch.micro_batch_per_gpu, config.batch.gradient_accumulation_steps,
                   data_ranks, data_ranks == 1 ? "data-parallel rank" : "data-parallel ranks"));
  line("steps", fmt::format("{}: {} tokens per step, {} in all (training data: {} tokens)",
                            config.run.steps, tokens_per_step, tokens_per_step * config.run.steps,
                            loader->dataset().train().size()));
  for (const estimate::BudgetCheck& check : fit.checks) {
    line(check.name == "device" ? "memory" : "",
         fmt::format("{} per rank: {} of {}", check.name, FormatBytes(check.need),
                     check.limit
                         ? fmt::format("{} ({})", FormatBytes(*check.limit), check.limit_source)
                         : fmt::format("no limit checked ({})", check.limit_source)));
  }
  line("run dir", run_dir);
  std::fputs(text.c_str(), out);
  return OkStatus();
}

Status DryRunTrain(ConfigSources sources, int ranks, std::optional<std::string> resume,
                   bool overwrite) {
  DryRunRequest request;
  SLUICE_ASSIGN_OR_RETURN(std::optional<RankPlacement> placement,
                          RankPlacementFromEnvironment(ProcessEnvironment()));
  sources.world_size = 1;
  if (placement.has_value()) {
    request.rank = placement->rank;
    sources.world_size = placement->world_size;
    request.ranks_source =
        fmt::format("{}: {}; this is rank {}, local rank {}", placement->launcher,
                    placement->variables, placement->rank, placement->local_rank);
  }
  if (ranks > 0) {
    sources.world_size = ranks;
    request.ranks_source = "--ranks";
  }
  request.sources = std::move(sources);
  request.resume = std::move(resume);
  request.overwrite = overwrite;
  return RunTrainDryRun(request, stdout);
}

}  // namespace sluice::cli
