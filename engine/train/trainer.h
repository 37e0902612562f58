// Training on the ranks of an MPI world through the engine (engine.h: the process grid, the model
// and the ZeRO engine of engine/zero/zero_engine.h), any stage 0-3, with the optimizer state
// (stages 1-3) and the parameters (stage 3) optionally offloaded to host memory or NVMe as
// zero_optimization.offload_* say. One code path: a process started without mpirun is a world of
// one. Each data-parallel rank reads its slice of every global batch (DataLoader(data rank, data
// size)) and of the validation batches:
//
//   SLUICE_ASSIGN_OR_RETURN(Config config, LoadTrainConfig(sources));
//   TrainerOptions options;  // progress to stderr, files into config.run.dir (rank 0 only)
//   SLUICE_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config, options));
//   SLUICE_ASSIGN_OR_RETURN(TrainSummary summary, trainer->Run());
//
// One optimizer step: gradient_accumulation_steps micro-batches of train_micro_batch_size_per_gpu
// sequences per rank, each forward/backward with loss gradient loss_scale / GAS, the gradients
// reduced as the stage does; then ZeroEngine::Step: (f16: the gradient rounded to fp16) the
// global norm of the unscaled gradient over all ranks; an inf or NaN on any rank skips the step
// everywhere (counted, the scheduler not stepped, the fp16 loss scale adjusted); otherwise Adam
// (engine/zero/sharded_adam.h, or offloaded_adam.h with offload_optimizer) with grad_scale = clip
// coefficient / loss scale at the schedule's rate, and the schedule steps. Skipping on a non-finite
// gradient applies to every precision (DeepSpeed's bf16 optimizer checks too; for fp32 and a static
// fp16 scale DeepSpeed would apply the step and poison the weights). A step's loss is the mean over
// the ranks, its tokens those of all ranks.
//
// Run() also evaluates every run.eval_interval steps (and, unless that is 0, before the first and
// after the last step) over the same data.eval_batches validation micro-batches per rank (the
// mean over the ranks). Rank 0 alone writes run.dir/config.resolved.json at the start, one
// metrics.jsonl line per step (its own memory peaks; model TFLOP/s and MFU, flops.h), summary.json
// and loss.png (loss_plot.h) at the end, shows progress (progress.h) and prints the summary, which
// sets each tier's and category's peak against the estimator's prediction (memory_report.h).
// With run.trace every rank records its units, optimizer steps and evaluations on the compute
// lane and its collectives on the comm lane, and rank 0 writes them all into trace.json, one
// Perfetto process per rank (runtime/trace_merge.h).
//
// Checkpoints (checkpointing.h): with checkpoint.save_interval > 0, Run() saves every that many
// steps and after the last one: every rank's ZeRO state plus the step, the data loader's
// position, the loss scaler, the schedule's position and Adam's step count. A trainer created
// with TrainerOptions::resume restores all of it, whatever world size and ZeRO stage wrote it,
// and Run() continues up to run.steps, appending to metrics.jsonl after the resumed step (lines
// of later steps, from a run that went on past that checkpoint, are dropped), so the losses are
// those of a run that never stopped. model.init_from loads initial weights instead of the random
// initialization, with a fresh optimizer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/data_loader.h"
#include "engine/model/model.h"
#include "engine/train/device_peak.h"
#include "engine/train/engine.h"
#include "engine/train/loss_scaler.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/metrics_writer.h"
#include "engine/train/precision.h"
#include "engine/train/step_metrics.h"
#include "engine/train/summary.h"
#include "engine/zero/zero_engine.h"
#include "runtime/comm.h"
#include "runtime/file_lock.h"
#include "runtime/memory_accounting.h"
#include "runtime/status.h"

namespace sluice::train {

enum class ProgressMode { kAuto, kBar, kPlain, kOff };

struct TrainerOptions {
  // The ranks to train on (not owned; outlives the trainer). Null: the MPI world with
  // run.comm_timeout (CreateTrainWorld), one rank when the process was not started by mpirun.
  Comm* world = nullptr;
  // The next three apply on rank 0; the other ranks show and write nothing.
  // kAuto: a bar when `progress_stream` is a terminal, plain lines otherwise.
  ProgressMode progress = ProgressMode::kAuto;
  std::FILE* progress_stream = stderr;
  // Run() writes config.resolved.json, metrics.jsonl and summary.json into config.run.dir, and
  // the scalars of each step to the tensorboard and csv_monitor files the config enables
  // (monitor.h).
  bool write_files = true;
  // Run() prints the summary table here (nullptr: not printed).
  std::FILE* summary_stream = stdout;
  // Continue from a checkpoint: "latest" (the run's own checkpoints, CheckpointsDirOf) or a step,
  // checkpoints or run directory. model.init_from is then ignored.
  std::optional<std::string> resume;
  // A resume whose trajectory-deciding settings or training data differ from the checkpoint's
  // goes on (warning) instead of being refused (checkpointing.h, ResumeChecks).
  bool allow_config_change = false;
  // A run that would start a new history in a run directory holding another run's checkpoints
  // deletes them instead of being refused (run_files.h, ClaimRunDirectory).
  bool overwrite = false;
  // Run() stops after the step in which any rank received SIGTERM, SIGINT or SIGUSR2
  // (runtime/stop_signal.h; the caller installs the handlers): every rank finishes that step,
  // a checkpoint is saved when checkpointing is configured, and the summary says why it stopped.
  bool stop_on_signal = false;
};

// How often Run() evaluates and logs: run.eval_interval, and run.log_interval (or DeepSpeed's
// steps_per_print when only that is given).
struct TrainIntervals {
  int64_t eval_interval = 0;  // 0 = never
  int64_t log_interval = 10;
};
TrainIntervals IntervalsFromConfig(const Config& config);

class Trainer {
 public:
  // Builds the device, the model and the ZeRO engine (parameters initialized from run.seed), the
  // data loader, the schedule and the loss scaler. Errors name what to change: a missing data
  // file, a model that does not fit device.memory_limit, a cuda device, an offload combination
  // the engine does not implement (its error, with the key to change).
  // Collective: a rank whose set-up failed makes the others fail too instead of waiting.
  static Result<std::unique_ptr<Trainer>> Create(const Config& config,
                                                 const TrainerOptions& options = {});
  ~Trainer();

  // One optimizer step (see the file comment). Its metrics have no val_loss. Collective.
  Result<StepMetrics> TrainStep();
  // Mean loss over the fixed validation batches of all ranks. FailedPrecondition when the run
  // has no validation data. Collective.
  Result<double> Evaluate();
  bool has_validation() const { return validation_.has_value(); }

  // run.steps steps with evaluation, files, progress and the summary. Collective.
  Result<TrainSummary> Run();
  // Saves checkpoint steps_done() now (checkpointing.h); returns its directory. Collective.
  Result<std::filesystem::path> SaveCheckpoint();
  // The checkpoint this trainer resumed from (empty for a fresh run).
  const std::filesystem::path& resumed_from() const { return resumed_from_; }

  // The config as trained: the batch keys fitted to the world size (FitBatchToWorld).
  const Config& config() const { return config_; }
  // The grid, device, model and ZeRO engine of one step (engine.h).
  Engine& engine() const { return *engine_; }
  // Created with ModelStorage::kExternal: the ZeRO engine owns its parameters and gradients.
  model::Model<float>& model() const { return engine_->model(); }
  zero::ZeroEngine& zero() const { return engine_->zero(); }
  const zero::ZeroOptimizer& optimizer() const { return engine_->zero().optimizer(); }
  int rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }
  const LossScaler& loss_scaler() const { return scaler_; }
  const LrSchedule& schedule() const { return schedule_; }
  Precision precision() const { return precision_; }
  int64_t steps_done() const { return steps_done_; }

 private:
  Trainer(const Config& config, const TrainerOptions& options, LrSchedule schedule,
          LossScaler scaler, Precision precision);
  Status Build();
  // The phases of Build(), each followed by an agreement across the ranks.
  Status LockRunDirectory();
  Status OpenData();
  // The parameters (and on resume the rest of the state): random, model.init_from or the
  // checkpoint; then published. Collective.
  Status LoadStartingState();
  // `model_tensors`: ResumeChecks::model_tensors.
  Status ResumeFromCheckpoint(int64_t model_tensors);
  // Rank 0: the run directory, config.resolved.json and metrics.jsonl.
  Status PrepareRunFiles(std::optional<MetricsWriter>* metrics);
  Status FinishRunFiles(const TrainSummary& summary);
  // run.trace: every rank's events into run.dir/trace.json (rank 0 writes). Collective.
  Status WriteTrace();
  void TakePeaks(std::array<uint64_t, kNumMemoryTiers>* step_peaks);
  // The largest stop signal any rank received (0: none). Collective.
  Result<int> AgreedStopSignal();
  // After `step`, for stop_signal_: saves a checkpoint where checkpointing is configured
  // (checkpoint.save_interval or checkpoint.dir) unless `saved` already, and says where.
  Status StopEarly(int64_t step, bool saved);
  // Everything but the wall time, the initial evaluation and the memory report, which Run()
  // adds.
  TrainSummary Summarize(const std::vector<StepMetrics>& steps) const;

  Config config_;
  TrainerOptions options_;
  LrSchedule schedule_;
  LossScaler scaler_;
  Precision precision_;
  // Declaration order is destruction order in reverse: the world outlives the engine.
  std::unique_ptr<Comm> owned_world_;
  FileLock run_lock_;  // the run directory's, held by the rank that writes files
  Comm* world_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::optional<data::DataLoader> loader_;
  std::optional<data::ValidationIterator> validation_;
  int64_t steps_done_ = 0;
  int64_t profiled_steps_ = 0;  // steps whose ops the profile counts (run.profile_ops)
  int stop_signal_ = 0;         // the signal Run() stopped for, 0 when it ran every step
  std::filesystem::path resumed_from_;
  int64_t total_tokens_ = 0;
  int num_threads_ = 0;
  RunPeak peak_;  // what MFU is measured against (device_peak.h)
  // This rank's peaks of every tier and category since the trainer was created (set-up
  // included).
  MemorySnapshot run_peaks_;
};

}  // namespace sluice::train
