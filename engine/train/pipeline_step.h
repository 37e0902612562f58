// The engine's steps with pipeline stages (pipeline.stages > 1): each rank holds one stage of the
// model (Model::CreateChunks: the layers of its pipeline coordinate, in pipeline.chunks ranges
// with the interleaved schedule), a ZeRO engine shards and
// reduces that stage over the data-parallel group, and a PipelineExecutor runs the step's
// micro-batches through the stages in the order of pipeline.schedule.
//
//   SLUICE_ASSIGN_OR_RETURN(std::vector<model::ModelStage> chunks,
//                           PipelineChunksOf(config, model_options, groups.coords().pipeline));
//   ... Model::CreateChunks(model_options, chunks, ...), ZeroEngine::Create(..., groups, ...)
//   SLUICE_ASSIGN_OR_RETURN(auto pipeline, PipelineRunner::Create(config, groups, device, model,
//                                                                 zero));
//   SLUICE_ASSIGN_OR_RETURN(EngineStep step, pipeline->TrainStep(request, next));
//
// The step. The micro-batches are the step's gradient_accumulation_steps (DeepSpeed's
// PipelineEngine: micro-batches = GAS). Every stage reads them from the data loader (the ranks of
// one pipeline share a data-parallel rank, so they read the same ones); the first stage takes the
// token ids, the last the targets. ZeroEngine::BeginPipelinedPass binds the ZeRO engine to the
// stage's model for the executor's pass; its per-unit hooks reduce each micro-batch's gradients
// as ForwardBackward's would, the executor's ReduceGrads ends the ZeRO pass and its OptimizerStep
// is ZeroEngine::Step (the gradient norm and overflow completed over the model-parallel group:
// every stage's parameters). The loss is the last stage's mean over the micro-batches, broadcast
// to every stage by the executor, then averaged over the data-parallel replicas, as one stage's.
//
// Against pipeline.stages 1. The stages compute each micro-batch as the whole model does, and
// their gradients accumulate in the same order as the micro-batch passes of pp 1 (both schedules
// run each stage's backwards in micro-batch order), so the gradients, the reductions over the
// data-parallel group and the updates are those of pp 1 bit for bit; the gradient norm sums the
// same squares in another order (per stage, then across stages), so its last bits may differ,
// and with them the clip coefficient where gradient_clipping clips.
//
// Evaluation runs each batch through the (virtual) stages forward only (no executor: a forward
// pass carried by the same point-to-point link), the loss from the last stage broadcast as in a
// step.
//
// Checkpoints: each stage saves its own layers' state under their whole-model names, so the
// stages' files together are the whole model's checkpoint, which resumes at any pipeline, tensor
// and data size (checkpointing.h, ModelTensorsOverStages).
//
// Tied embeddings: the last stage's head reads a copy of the token table (ParameterInfo::mirror)
// whose gradient the ZeRO engine sums with the first stage's once per step (every ZeRO stage).
//
// Schedules: gpipe, 1f1b, interleaved-1f1b and zb-h1 (its split backward taken by the ZeRO
// engine's hooks, which reduce a unit's gradients after its backward-weight). Interleaved: the
// rank's chunks are one Model, so one ZeRO engine shards, gathers and reduces all of them; its
// per-unit hooks see the chunks' units in the order the schedule runs them (the ZeRO-3 trace
// records that order), and each chunk's backwards run in micro-batch order, so the gradients
// are again those of pp 1 bit for bit. Not yet: the GPU (pipeline transfers run on MPI only).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/batch.h"
#include "engine/estimate/partition_weights.h"
#include "engine/model/model.h"
#include "engine/model/model_stage.h"
#include "engine/parallel/pipeline_executor.h"
#include "engine/parallel/pipeline_schedule.h"
#include "engine/parallel/process_groups.h"
#include "engine/train/engine.h"
#include "engine/zero/comm_queue.h"
#include "engine/zero/zero_engine.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::train {

// The decoder layers of pipeline stage `stage` of config.parallel.pipeline: its pipeline.chunks
// ranges, chunk c the virtual stage c * P + stage of the P * chunks parts partitioned by
// pipeline.partition_method (layer_partition.h, with the estimator's per-layer weights,
// estimate/partition_weights.h; `times` the measured ones for "time", FLOPs standing in where
// null). The whole model when there is one stage. InvalidArgument naming the keys for more parts
// than layers, or a type regex that matches no layer class.
Result<std::vector<model::ModelStage>> PipelineChunksOf(
    const Config& config, const model::ModelOptions& options, int stage,
    const estimate::LayerTimes* times = nullptr);

// pipeline.schedule as a schedule of config.parallel.pipeline stages and
// gradient_accumulation_steps micro-batches.
Result<parallel::PipelineSchedule> PipelineScheduleOf(const Config& config);

class PipelineRunner {
 public:
  // Splits the pipeline group's communicator for the executor (collective over it) and builds
  // the schedule. `groups`, `device`, `model` (this rank's stage) and `zero` (over groups.data())
  // must outlive the runner.
  static Result<std::unique_ptr<PipelineRunner>> Create(const Config& config,
                                                        const parallel::ProcessGroups& groups,
                                                        Device& device, model::Model<float>& model,
                                                        zero::ZeroEngine& zero);
  ~PipelineRunner();

  // One optimizer step over the schedule's micro-batches from `next`: every stage reads all of
  // them. Collective over the world. forward_s holds the pipelined pass (its forwards and
  // backwards interleave), backward_s 0.
  Result<EngineStep> TrainStep(const StepRequest& request, const NextTrainBatch& next);
  // As Engine::Evaluate: the mean of the batches' losses over the data-parallel replicas, on
  // every rank. Collective over the world.
  Result<double> Evaluate(const NextEvalBatch& next);

  const parallel::PipelineSchedule& schedule() const { return schedule_; }

 private:
  PipelineRunner(const Config& config, const parallel::ProcessGroups& groups, Device& device,
                 model::Model<float>& model, zero::ZeroEngine& zero,
                 parallel::PipelineSchedule schedule);
  // The executor whose loss gradient is `loss_grad` (the loss scale / micro-batches): made anew
  // when the fp16 loss scale changed.
  Result<parallel::PipelineExecutor<float>*> ExecutorFor(double loss_grad);
  Status CheckBatch(const data::Batch& batch, int micro) const;
  // One evaluation batch through the stages; the last stage's mean loss (0 elsewhere).
  Result<double> EvaluateBatch(const data::Batch& batch);
  // `value` from the last stage to every stage of the pipeline.
  Result<double> BroadcastFromLast(double value);

  const parallel::ProcessGroups* groups_;
  Device* device_;
  model::Model<float>* model_;
  zero::ZeroEngine* zero_;
  parallel::PipelineSchedule schedule_;
  int64_t micro_batch_;  // sequences per micro-batch
  int64_t seq_len_;
  double max_grad_norm_;
  std::unique_ptr<zero::CommQueue> queue_;  // over a Split of the pipeline group
  std::unique_ptr<parallel::PipelineExecutor<float>> executor_;
  double executor_loss_grad_ = 0.0;
  std::vector<data::Batch> batches_;  // the step's micro-batches
};

}  // namespace sluice::train
