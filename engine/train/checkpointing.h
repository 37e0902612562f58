// Training checkpoints (docs/checkpoint_format.md, "Training"): what a run saves every
// checkpoint.save_interval steps, what `sluice train --resume` restores, and the weights
// model.init_from starts from. Each rank saves the partitions it owns (ZeroEngine::
// SavedStateRanges), streamed from the optimizer tile by tile into the shard files
// (ZeroOptimizer::StreamState, checkpoint::RankStreamWriter: on NVMe the memory is a few tiles,
// not the shard), and on load reads the ranges its own layout needs (ZeroEngine::ImportState): a
// checkpoint written by any world size and ZeRO stage loads into any other.
//
//   TrainingProgress progress{.step = steps_done, ...};
//   SLUICE_ASSIGN_OR_RETURN(auto dir, SaveTrainingCheckpoint(config, engine, registry, world,
//                                                            progress));
//   ...
//   SLUICE_ASSIGN_OR_RETURN(auto dir, ResolveResumeDir(config, "latest"));
//   SLUICE_ASSIGN_OR_RETURN(TrainingProgress p, LoadTrainingCheckpoint(dir, engine, registry,
//                                                                      {.config = &config}));
//   (every rank agrees that loading succeeded, then engine.PublishParameters())
//
// What a resume verifies before it loads anything: the manifest's checksums (an edited field is
// refused naming it), that the recorded progress is consistent (checkpoint/
// training_state_checks.h), and that this run's settings that decide the trajectory
// (checkpoint/trajectory_config.h) and its training data (content fingerprint) are the
// checkpoint's; a difference is refused naming every setting unless allowed. Every shard file is
// bound to the manifest by its checksum and every block read is verified.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/config/config.h"
#include "engine/model/parameter_registry.h"
#include "engine/zero/zero_engine.h"
#include "runtime/comm.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::train {

// The training state beside the ZeRO state; the manifest's "states" (its "optimizer.step" is the
// engine's Adam step count, which ImportState restores).
struct TrainingProgress {
  int64_t step = 0;          // optimizer steps done, skipped ones included
  int64_t total_tokens = 0;  // trained on so far, all ranks
  nlohmann::json data_loader = nlohmann::json::object();  // DataLoader::SaveState
  nlohmann::json loss_scaler = nlohmann::json::object();  // LossScaler::SaveState
  int64_t lr_last_batch_iteration = -1;                   // LrSchedule::last_batch_iteration
};

// checkpoint.dir, or RUN_DIR/checkpoints.
std::filesystem::path CheckpointsDirOf(const Config& config);

// Saves checkpoint `progress.step` of every rank's ZeRO state (fp32 master weights, exp_avg and,
// for Adam, exp_avg_sq; states.optimizer.type names the optimizer), the progress and the resolved
// config, atomically, keeping checkpoint.keep_last. The shard files are written through the rank's
// I/O engine (engine.tiers(): the one its NVMe tiers use, made here when there is none yet).
// With zero_optimization.stage3_gather_16bit_weights_on_model_save, then also writes the
// consolidated 16-bit model into the committed step directory (SaveConsolidated16BitModel).
// Returns the committed step directory. Collective over `world` (every rank learns of a failure
// anywhere, and nothing is committed then; a failed 16-bit model leaves the committed checkpoint
// as it was and is returned as the error).
Result<std::filesystem::path> SaveTrainingCheckpoint(const Config& config,
                                                     const zero::ZeroEngine& engine,
                                                     const model::ParameterRegistry& registry,
                                                     Comm& world, const TrainingProgress& progress);

// The dtype of the 16-bit model a save writes with stage3_gather_16bit_weights_on_model_save:
// the run's compute precision (model.dtype) when it is bf16 or fp16, bf16 when it trains in fp32.
DType Consolidated16BitDType(const Config& config);

// DeepSpeed's save_16bit_model with stage3_gather_16bit_weights_on_model_save, for committed
// checkpoint `step_dir`: the model in Hugging Face's layout, as `sluice convert --dtype` writes it
// (checkpoint/convert.h: config.json and model.safetensors, or past 5 GB shards plus
// model.safetensors.index.json), in Consolidated16BitDType, into `step_dir` itself, so that the
// folder is what transformers' from_pretrained and model.init_from load. The values are the
// master weights rounded to nearest even: the parameters the passes compute with in a bf16 or
// fp16 run (the Adam kernel writes them so). Rank 0 gathers them from every rank's shard files,
// verifying each block it reads, one tensor in memory at a time, and writes each file atomically
// (config.json last); the other ranks wait for its result, so every rank returns the same status.
// On a failure the model files written so far are removed, the checkpoint's own files are left
// as they were, and the error names the file. Collective over `world`; `registry` sizes the wait.
Status SaveConsolidated16BitModel(const Config& config, const model::ParameterRegistry& registry,
                                  const std::filesystem::path& step_dir, Comm& world);

// The step directory `sluice train --resume` names: "latest" (or "") follows the run's own
// checkpoints (CheckpointsDirOf); anything else is a step, checkpoints or run directory
// (checkpoint::ResolveCheckpointDir). NotFound saying so when there is nothing to resume from.
Result<std::filesystem::path> ResolveResumeDir(const Config& config, const std::string& resume);

// How a resume compares the checkpoint with the run that continues it.
struct ResumeChecks {
  // This run's config: its trajectory-deciding settings and training data must be the
  // checkpoint's. Null: not compared.
  const Config* config = nullptr;
  // Differences are then logged (with `report`) instead of refused (--allow-config-change).
  bool allow_config_change = false;
  bool report = false;  // log warnings (rank 0)
  // The whole model's parameter tensors (aliases aside) when `registry` is one pipeline stage's
  // (ModelTensorsOverStages); 0: the registry's own. The checkpoint must hold exactly these.
  int64_t model_tensors = 0;
};

// The parameter tensors (aliases and mirrors aside) of the whole model whose pipeline stage
// `registry` is:
// the stages' counts added over `pipeline` (the stages of this rank's tensor and data
// coordinates). Collective over it.
Result<int64_t> ModelTensorsOverStages(const model::ParameterRegistry& registry, Comm& pipeline);

// Local: verifies the manifest and the recorded progress, compares the config and data
// (`checks`), checks that the checkpoint holds this run's optimizer's state (an Adam checkpoint
// does not resume a Lion run nor the reverse: FailedPrecondition naming both), that it holds every
// parameter of `registry` with its shape (fp32 master weights and the optimizer's moments),
// imports them into `engine` with the optimizer's step count, and
// returns the progress. The engine must then publish (ZeroEngine::PublishParameters) once every
// rank succeeded. Errors name the checkpoint file, the tensor and the field: DataLoss for a
// damaged or edited checkpoint, FailedPrecondition naming the settings for a config change.
Result<TrainingProgress> LoadTrainingCheckpoint(const std::filesystem::path& step_dir,
                                                zero::ZeroEngine& engine,
                                                const model::ParameterRegistry& registry,
                                                const ResumeChecks& checks = {});

// Local: model.init_from. `path` is a safetensors file, a model.safetensors.index.json or a
// folder holding either (Hugging Face names, safetensors_loader.h), or a Sluice checkpoint (a
// step, checkpoints or run directory): its master weights only. The optimizer starts fresh. Then
// ZeroEngine::PublishParameters, as for LoadTrainingCheckpoint. A NaN or infinite weight is
// refused naming the tensor and the element (as each rank reads its range); so is a safetensors
// file with a tensor the model has no parameter for. `loaded`, when given, says what was loaded
// from where, for the log. `model_tensors`: as ResumeChecks'.
Status LoadInitialWeights(const std::filesystem::path& path, zero::ZeroEngine& engine,
                          const model::ParameterRegistry& registry, std::string* loaded = nullptr,
                          int64_t model_tensors = 0);

}  // namespace sluice::train
