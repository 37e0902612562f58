// The engine a training loop drives (DeepSpeed's DeepSpeedEngine without the loop): the process
// grid and its communicators, the device and its ops backend, the model, the ZeRO engine over
// the data-parallel group, and one optimizer step's schedule. The trainer (trainer.h) keeps what
// is about a run rather than a step: the data, the learning-rate schedule and loss scale, files,
// metrics, checkpoints and progress.
//
//   SLUICE_ASSIGN_OR_RETURN(parallel::ProcessGrid grid, PlanEngine(&config, world.size()));
//   SLUICE_ASSIGN_OR_RETURN(auto engine, Engine::Create(config, world, grid));
//   SLUICE_RETURN_IF_ERROR(engine->zero().InitializeParameters(seed));
//   SLUICE_ASSIGN_OR_RETURN(EngineStep step, engine->TrainStep({.step = 1, .lr = lr}, next_batch));
//
// The step's schedule: gradient_accumulation_steps micro-batches, each a forward and backward
// with loss gradient loss_scale / GAS whose gradients the ZeRO engine reduces as its stage does,
// then the optimizer step (ZeroEngine::Step: norm, overflow, clip at gradient_clipping, skip).
// With pipeline.stages > 1 the model is this rank's pipeline stage and the steps and evaluations
// run through the stages (pipeline_step.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "engine/config/config.h"
#include "engine/data/batch.h"
#include "engine/estimate/partition_weights.h"
#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/parallel/process_grid.h"
#include "engine/parallel/process_groups.h"
#include "engine/zero/zero_engine.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/ops/profiled_ops_backend.h"
#include "runtime/status.h"

namespace sluice::train {

class PipelineRunner;  // pipeline_step.h

// Before anything is allocated, the same outcome on every rank: the batch keys fitted to the
// world (FitBatchToWorld), the process grid checked against it, the memory budgets checked (a
// config that cannot fit is refused, naming the budget), and offload_optimizer.ratio "auto"'s
// device budget resolved. Returns the grid.
Result<parallel::ProcessGrid> PlanEngine(Config* config, int world_size);

// Fills the batch with the next micro-batch of this rank's data.
using NextTrainBatch = std::function<Status(data::Batch* batch)>;
// Fills the batch with the next evaluation micro-batch; false when there is none left.
using NextEvalBatch = std::function<Result<bool>(data::Batch* batch)>;

struct StepRequest {
  int64_t step = 0;  // 1-based, for errors and the trace
  double lr = 0.0;
  double loss_scale = 1.0;  // the fp16 loss scale; 1 for bf16 and fp32
};

struct EngineStep {
  double loss = 0.0;         // the micro-batches' mean, averaged over the data-parallel replicas
  int64_t tokens = 0;        // trained by all replicas
  double model_flops = 0.0;  // all replicas (flops.h)
  double grad_norm = 0.0;
  bool overflow = false;  // a non-finite gradient: the optimizer step was skipped everywhere
  double forward_s = 0.0;
  double backward_s = 0.0;
  double optimizer_s = 0.0;
};

class Engine {
 public:
  // The process groups of `grid`, the device, the ops backend, the model (its parameters and
  // gradients owned by the ZeRO engine) and the ZeRO engine. Each phase ends with every rank
  // agreeing that it succeeded. Collective; `world` outlives the engine. The parameters are not
  // initialized (zero().InitializeParameters, or a checkpoint).
  static Result<std::unique_ptr<Engine>> Create(const Config& config, Comm& world,
                                                const parallel::ProcessGrid& grid);
  ~Engine();

  // One optimizer step over gradient_accumulation_steps micro-batches from `next`. Collective.
  Result<EngineStep> TrainStep(const StepRequest& request, const NextTrainBatch& next);
  // The mean loss over the batches of `next`, averaged over the data-parallel replicas (every
  // replica has the same number of batches). FailedPrecondition when there are none. Collective.
  Result<double> Evaluate(const NextEvalBatch& next);

  Comm& world() const { return *world_; }
  const parallel::ProcessGroups& groups() const { return *groups_; }
  Device& device() const { return *device_; }
  model::Model<float>& model() const { return *model_; }
  zero::ZeroEngine& zero() const { return *zero_; }
  // The ops table's device time per op, when run.profile_ops; else null.
  ops::ProfiledOpsBackend* op_profile() const { return op_profile_; }
  // How the linear layers multiply fp32 matrices (model.matmul_precision).
  ops::MatmulPrecision matmul_precision() const { return matmul_precision_; }

 private:
  Engine(const Config& config, Comm& world);
  // The device, its allocator and the ops backend.
  Status BuildDevice(const Config& config);
  // This rank's model options: the compute copy's, of its tensor rank.
  Result<model::ModelOptions> ModelOptionsOf(const Config& config) const;
  // For pipeline.partition_method "time" with pipeline stages, the layer times world rank 0
  // measured (layer_timing.h), on every rank; none otherwise. Collective then.
  Result<std::optional<estimate::LayerTimes>> PartitionTimes(const Config& config);
  // `times`: PartitionTimes'.
  Status BuildModel(const Config& config, const std::optional<estimate::LayerTimes>& times);
  Status BuildZero(const Config& config);

  Comm* world_;
  int64_t accumulation_;
  double max_grad_norm_;
  // Destroyed in reverse: the engine before the model, everything allocated from the device
  // before the device.
  std::unique_ptr<parallel::ProcessGroups> groups_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<model::DeviceAllocator> allocator_;
  std::unique_ptr<ops::OpsBackend> ops_;
  ops::MatmulPrecision matmul_precision_ = ops::MatmulPrecision::kFp32;
  ops::ProfiledOpsBackend* op_profile_ = nullptr;  // ops_, when profiled
  std::unique_ptr<model::Model<float>> model_;
  std::unique_ptr<zero::ZeroEngine> zero_;
  // pipeline.stages > 1: model_ is this rank's stage, and the steps run through the pipeline.
  std::unique_ptr<PipelineRunner> pipeline_;
  data::Batch batch_;
};

}  // namespace sluice::train
