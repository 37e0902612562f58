// Single-rank training on the cpu device: all state on the device, no offload (on one rank every
// ZeRO stage partitions nothing, so stages 1-3 train as stage 0; an offload device is refused):
//
//   SLUICE_ASSIGN_OR_RETURN(Config config, LoadTrainConfig(sources));
//   TrainerOptions options;  // progress to stderr, files into config.run.dir
//   SLUICE_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config, options));
//   SLUICE_ASSIGN_OR_RETURN(TrainSummary summary, trainer->Run());
//
// One optimizer step: gradient_accumulation_steps micro-batches of train_micro_batch_size_per_gpu
// sequences, each forward/backward with loss gradient loss_scale / GAS accumulating into the
// model's fp32 gradient buffer; then (f16: round the gradient to fp16) the global norm of the
// unscaled gradient; an inf or NaN anywhere skips the step (counted, the scheduler not stepped,
// the fp16 loss scale adjusted); otherwise Adam with grad_scale = clip coefficient / loss scale
// (grad_clip.h, device_adam.h) at the schedule's rate, then the schedule steps. Skipping on a
// non-finite gradient applies to every precision (DeepSpeed's bf16 optimizer checks too; for
// fp32 and for a static fp16 scale DeepSpeed would apply the step and poison the weights).
//
// Run() also evaluates every run.eval_interval steps (and, unless that is 0, before the first and
// after the last step) over the same data.eval_batches validation micro-batches, writes
// run.dir/config.resolved.json at the start, one metrics.jsonl line per step, summary.json at the
// end (and with run.trace, trace.rank0.json: forward, backward, optimizer and evaluation of every
// step on the compute lane), shows progress (progress.h) and returns the summary.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/data_loader.h"
#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/train/device_adam.h"
#include "engine/train/loss_scaler.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/precision.h"
#include "engine/train/step_metrics.h"
#include "engine/train/summary.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::train {

enum class ProgressMode { kAuto, kBar, kPlain, kOff };

struct TrainerOptions {
  // kAuto: a bar when `progress_stream` is a terminal, plain lines otherwise.
  ProgressMode progress = ProgressMode::kAuto;
  std::FILE* progress_stream = stderr;
  // Run() writes config.resolved.json, metrics.jsonl and summary.json into config.run.dir.
  bool write_files = true;
  // Run() prints the summary table here (nullptr: not printed).
  std::FILE* summary_stream = stdout;
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
  // Builds the device, the model (initialized from run.seed), the data loader, the optimizer,
  // the schedule and the loss scaler. Errors name what to change: a missing data file, a model
  // that does not fit device.memory_limit, a cuda device on a machine without one.
  static Result<std::unique_ptr<Trainer>> Create(const Config& config,
                                                 const TrainerOptions& options = {});
  ~Trainer();

  // One optimizer step (see the file comment). Its metrics have no val_loss.
  Result<StepMetrics> TrainStep();
  // Mean loss over the fixed validation batches. FailedPrecondition when the run has no
  // validation data.
  Result<double> Evaluate();
  bool has_validation() const { return validation_.has_value(); }

  // run.steps steps with evaluation, files, progress and the summary.
  Result<TrainSummary> Run();

  const Config& config() const { return config_; }
  model::Model<float>& model() { return *model_; }
  const DeviceAdam& optimizer() const { return *optimizer_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  const LrSchedule& schedule() const { return schedule_; }
  Precision precision() const { return precision_; }
  int64_t steps_done() const { return steps_done_; }

 private:
  Trainer(const Config& config, const TrainerOptions& options, LrSchedule schedule,
          LossScaler scaler, Precision precision);
  Status Build();
  // Everything but the wall time and the initial evaluation, which Run() adds.
  TrainSummary Summarize(const std::vector<StepMetrics>& steps) const;

  Config config_;
  TrainerOptions options_;
  LrSchedule schedule_;
  LossScaler scaler_;
  Precision precision_;
  // Declaration order is destruction order in reverse: everything allocated from the device
  // goes before the device.
  std::unique_ptr<Device> device_;
  std::unique_ptr<model::DeviceAllocator> allocator_;
  std::unique_ptr<model::Model<float>> model_;
  std::unique_ptr<DeviceAdam> optimizer_;
  std::optional<data::DataLoader> loader_;
  std::optional<data::ValidationIterator> validation_;
  data::Batch batch_;
  int64_t steps_done_ = 0;
  int64_t total_tokens_ = 0;
  int num_threads_ = 0;
  // Peaks of each tier since the trainer was created (set-up included).
  std::array<uint64_t, kNumMemoryTiers> run_peak_bytes_{};
};

}  // namespace sluice::train
