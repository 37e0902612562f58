// ZeRO data parallelism over the ranks of a communicator, stages 0-3, for a Model<float>
// created with ModelStorage::kExternal (the engine owns every parameter and gradient buffer and
// binds them for the model's passes).
//
//   SLUICE_ASSIGN_OR_RETURN(ZeroOptions zero, ZeroOptionsFromConfig(config));
//   SLUICE_ASSIGN_OR_RETURN(auto model, model::Model<float>::Create(
//                                           model_options, allocator,
//                                           model::ModelStorage::kExternal));
//   SLUICE_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(zero, *model, world, device));
//   SLUICE_RETURN_IF_ERROR(engine->InitializeParameters(seed));
//   for each step:
//     for each of the gradient_accumulation_steps micro-batches (this rank's slice of the batch):
//       SLUICE_ASSIGN_OR_RETURN(double loss, engine->ForwardBackward(in, tgt, b, t, scale / gas));
//     SLUICE_ASSIGN_OR_RETURN(ZeroStepResult r, engine->Step({.lr = lr, .loss_scale = scale,
//                                                             .max_grad_norm = clip}));
//     SLUICE_ASSIGN_OR_RETURN(double mean_loss, engine->MeanAcrossRanks(loss));
//
// What each stage keeps on a rank (Ψ parameters, N ranks; shards are Ψ/N plus padding):
//   stage 0  full fp32 parameters, full fp32 gradients, full optimizer state; the gradients are
//            all-reduced (averaged) in buckets during the last micro-batch's backward (DDP).
//   stage 1  as 0, but the optimizer state is a shard: each rank steps its partitions and the
//            updated parameters are all-gathered (allgather_bucket_size per collective).
//   stage 2  as 1, but gradients are reduce-scattered in buckets after each micro-batch's units
//            and accumulated in an fp32 gradient shard; no full gradient buffer survives a pass.
//   stage 3  as 2, but parameters too are only a shard: the parameter coordinator gathers each
//            unit before its forward and backward and releases it after (prefetch by trace, a
//            hard live budget, persistence of small parameters; parameter_coordinator.h).
// The shard layout is DeepSpeed's ZeRO-3 one (shard_layout.h). Gradients accumulate in fp32 over
// the micro-batches. Step() computes the global gradient norm over all shards and ranks, skips
// the step on every rank when any rank's shard holds an inf or NaN (fp16 overflow), clips, and
// runs Adam on the shard.
//
// Collectives run on the engine's own communicator (a Split of `world`) from one comm stream
// (comm_queue.h), overlapping compute when overlap_comm is set. Every rank must make the same
// calls in the same order. Create() first checks that all ranks run the same ZeRO options and
// model; a stage-3 pass order that differs across ranks is caught at the end of the first pass;
// a rank that stops participating makes the others fail with DeadlineExceeded naming it after
// run.comm_timeout. After any failed pass or step the engine is unusable (FailedPrecondition).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/model/model.h"
#include "engine/parallel/process_groups.h"
#include "engine/parallel/tensor_comm.h"
#include "engine/zero/comm_queue.h"
#include "engine/zero/device_segments.h"
#include "engine/zero/gradient_reducer.h"
#include "engine/zero/parameter_coordinator.h"
#include "engine/zero/parameter_publisher.h"
#include "engine/zero/shard_layout.h"
#include "engine/zero/sharded_adam.h"
#include "engine/zero/step_guard.h"
#include "engine/zero/zero_binding.h"
#include "engine/zero/zero_optimizer.h"
#include "engine/zero/zero_options.h"
#include "engine/zero/zero_placement.h"
#include "engine/zero/zero_state_io.h"
#include "offload/host_shard_buffer.h"
#include "offload/rank_tiers.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::zero {

// Bytes of what the engine holds on the device, by role.
struct ZeroMemory {
  // The parameters in the parameter dtype (all of them in stage 0); 0 in stage 0 with f32, where
  // they are full_params itself, so that a sum of the fields counts each buffer once.
  uint64_t param_shard = 0;
  uint64_t full_params = 0;      // stages 0-2: the replicated fp32 compute copy
  uint64_t full_grads = 0;       // stages 0-1: the replicated fp32 gradients
  uint64_t grad_shard = 0;       // stages 1-3: the fp32 gradient shard
  uint64_t optimizer_state = 0;  // master weights (when kept apart), exp_avg, exp_avg_sq (Adam)
  // What offload keeps off the device instead (host memory, pinned staging, NVMe).
  uint64_t host_param_shard = 0;  // offload_param cpu
  uint64_t param_nvme = 0;        // offload_param nvme: the parameter swap extents
  uint64_t param_pinned = 0;      // offload_param nvme: the store's staging slots
  uint64_t param_cache = 0;       // offload_param nvme: groups cached in host memory (max_in_cpu)
  uint64_t host_grad_shard = 0;   // offload_optimizer cpu | nvme
  uint64_t optimizer_host = 0;    // offload_optimizer cpu: master, exp_avg, exp_avg_sq
  uint64_t optimizer_pinned = 0;  // the optimizer's staging ring
  uint64_t optimizer_nvme = 0;    // offload_optimizer nvme: the swap extents
};

class ZeroEngine {
 public:
  // Collective over `world`. `model` (kExternal storage), `world` and `device` must outlive the
  // engine; `device` holds every buffer of the engine (a cpu device: the model runs on the CPU
  // ops). FailedPrecondition when the ranks disagree on the options or the model.
  static Result<std::unique_ptr<ZeroEngine>> Create(const ZeroOptions& options,
                                                    model::Model<float>& model, Comm& world,
                                                    Device& device);
  // The same over the data-parallel group of a process grid: the engine shards and reduces over
  // groups.data(), and completes the gradient norm and the overflow flag over
  // groups.model_parallel(), where a parameter replicated across the tensor-parallel ranks is
  // counted once, on tensor rank 0, and a piece shared by a group of them once, on the group's
  // first rank. Collective
  // over the world; `groups` must outlive the engine.
  static Result<std::unique_ptr<ZeroEngine>> Create(const ZeroOptions& options,
                                                    model::Model<float>& model,
                                                    const parallel::ProcessGroups& groups,
                                                    Device& device);
  // Waits for the comm stream's pending work.
  ~ZeroEngine();

  // Each rank initializes only the elements it owns, exactly as Model::InitializeParameters
  // would the whole model (init.h), rounded to the parameter dtype; then publishes them.
  // Collective.
  Status InitializeParameters(uint64_t seed);

  // One micro-batch of this rank: forward, loss, backward with gradient loss_grad * d(mean
  // loss), and the gradient reduction of the stage. Returns this rank's mean loss. Collective.
  Result<double> ForwardBackward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                 int64_t seq, double loss_grad);
  // Forward and loss only (evaluation). Collective in stage 3.
  Result<double> ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                             int64_t seq);
  // The optimizer step, after exactly gradient_accumulation_steps ForwardBackward calls.
  // Collective.
  Result<ZeroStepResult> Step(const ZeroStepInput& input);

  // ---- Pipelined passes (engine/train/pipeline_step.h) ---------------------------------------
  // A pipeline executor (engine/parallel/pipeline_executor.h) runs a step's
  // gradient_accumulation_steps micro-batches through the model (a pipeline stage) in one pass,
  // BeginPass to EndPass, in its schedule's order, calling Model::Forward and Backward itself.
  // BeginPipelinedPass, before the executor opens that pass, zeroes the accumulators and binds
  // the engine's parameters and hooks to the model; the per-unit hooks then gather (stage 3) and
  // reduce as ForwardBackward's would, one unit's gradients of one micro-batch at a time, as
  // they become final (stages 0-1: each unit's of the last micro-batch all-reduce the
  // accumulated gradients; stages 2-3: every micro-batch's are reduce-scattered into the shard),
  // in one reduction pass: a schedule may finish units of several micro-batches in turn. The
  // hooks take a split backward (ZB-H1): stages 2-3 reduce what a unit's input half made final
  // after it and its deferred weights' gradients after the weight half, which may trail later
  // micro-batches' input halves; stages 0-1 reduce a unit after its last weight half. The model's
  // EndPass
  // enqueues the last reductions (BeforePassEnd). EndPipelinedPass, once the
  // model's pass has ended (the executor's ReduceGrads), unbinds and checks that exactly
  // gradient_accumulation_steps micro-batches went backward; Step() follows, as after the
  // micro-batches of ForwardBackward. Collective in the order of the passes' hooks. With
  // PassKind::kEval the pass is an evaluation (Model::BeginPass(false)): no gradients, stage 3
  // still gathers, and any number of micro-batches may run.
  Status BeginPipelinedPass(PassKind kind = PassKind::kTrain);
  Status EndPipelinedPass();
  // After a failed pipelined pass (the executor has ended the model's pass): unbinds; the engine
  // is unusable, as after any failure. Returns `error`.
  Status AbortPipelinedPass(Status error);

  // The mean of one value per rank (a loss), identical on every rank. Collective.
  Result<double> MeanAcrossRanks(double value);
  // The full parameters (the parameter dtype's values, as fp32) in the model's flat layout:
  // `out` holds layout().total_elements() floats. Collective.
  Status GatherFullParameters(std::span<float> out);

  // Hooks the caller wants around each unit (timing): called after the unit's parameters are
  // fetched and before they are released. Not owned; null clears.
  void SetUserHooks(model::UnitHooks* hooks) { user_hooks_ = hooks; }

  const ZeroOptions& options() const { return options_; }
  const ShardLayout& layout() const { return layout_; }
  int rank() const { return queue_->comm().rank(); }
  int world_size() const { return queue_->comm().size(); }
  // Stage 3 only (null otherwise).
  ParameterCoordinator* coordinator() const { return coordinator_.get(); }
  const ReducerStats& reducer_stats() const { return reducer_->stats(); }
  const ZeroOptimizer& optimizer() const { return *adam_; }
  // offload_param nvme only (null otherwise).
  const offload::NvmeParamStore* param_store() const { return param_store_.get(); }
  offload::RankTiers& tiers() const { return *tiers_; }  // the rank's one I/O engine and staging
  ZeroMemory memory() const;
  // A host copy of the fp32 gradients this rank steps with: its shard (stages 1-3) or the full
  // buffer (stage 0), as they are between the last micro-batch and Step().
  Result<std::vector<float>> ReadStepGradients();

  // OK, or FailedPrecondition after an earlier failed pass or step (the state may be partial).
  Status CheckUsable() const;

  // ---- Checkpoint state ---------------------------------------------------------------------
  // The optimizer state is saved through SavedStateRanges and optimizer().StreamState, and
  // restored through ImportState, whatever optimizer holds it.
  //
  // The ranges this rank saves: every element of its partitions (stages 1-3), so the ranks
  // together cover each parameter exactly once. In stage 0 every rank holds everything, and
  // rank 0 alone saves it (the other ranks return no range). Under tensor parallelism a
  // parameter replicated across the tensor ranks is saved by tensor rank 0 alone.
  std::vector<ZeroStateRange> SavedStateRanges() const;
  // Replaces this rank's state with what `readers` return for the elements it holds in its
  // current layout (each rank reads its own ranges, so the source may come from another world
  // size or stage) and sets the parameter shard to the master weights in the parameter dtype,
  // rounded exactly as a step writes them. Local: nothing is published. Once every rank
  // succeeded, PublishParameters() makes the parameters visible to the passes.
  Status ImportState(const ZeroStateReaders& readers);
  // Gathers the parameter shard into what the passes read (stage 0-2: the replicated fp32 copy;
  // stage 3: the persistent parameters). Collective.
  Status PublishParameters();

 private:
  class Hooks;

  ZeroEngine(const ZeroOptions& options, model::Model<float>& model, Device& device);
  // Both Creates: over `data`, and the model-parallel group of `groups` when given.
  static Result<std::unique_ptr<ZeroEngine>> CreateOver(const ZeroOptions& options,
                                                        model::Model<float>& model, Comm& data,
                                                        const parallel::ProcessGroups* groups,
                                                        Device& device);
  Status Build(Comm& world);
  // optimizer.type Lamb: hands the optimizer the partitions and the rank-order sum of the norms.
  Status SetLambPlan();
  Status Fail(Status status);
  // Called by the model once a pass is enqueued: the last gradient reductions.
  Status BeforePassEnd();
  Status FinishReductions();
  // reducer_->BeginPass, remembering whether the pass is the step's last.
  Status BeginReduction(bool boundary);
  // A split backward's halves: the unit's parameters but `deferred` (kInput), or those (kWeight).
  enum class GradHalf { kAll, kInput, kWeight };
  Status SumPartialGrads(int unit, GradHalf half = GradHalf::kAll,
                         std::span<const int> deferred = {});
  // A unit's gradients of one micro-batch are final: its partial sums are completed and the
  // reducer takes them (stages 0-1: in the step's last micro-batch only).
  Status UnitGradsFinal(int unit);
  Status SetUpModelParallel(const parallel::ProcessGroups& groups);
  Status SumTiedGrads();

  Result<double> RunPass(PassKind kind, const int32_t* inputs, const int32_t* targets,
                         int64_t batch, int64_t seq, double loss_grad);
  Status Publish();
  // The model's compute stream: where the engine's device work (zeroing, the norm, the device
  // optimizer, stage 0's widening) is enqueued, in order with the passes.
  Stream& compute() const { return model_->stream(); }
  // Zeroes the gradient accumulators for a new step.
  Status ZeroGradients();
  float* step_gradient_data() const;

  // Hook bodies.
  Status Before(const ModuleAccess& access);
  Status After(const ModuleAccess& access);
  // Split backward (zero-bubble schedules of a pipelined pass).
  bool SupportsSplitBackward() const;
  Status BeforeWeight(int unit);
  Status AfterWeight(int unit);

  ZeroOptions options_;
  model::Model<float>* model_;
  Device* device_;
  ZeroPlacement placement_;
  ShardLayout layout_;
  ZeroBinding binding_;
  // Buffers before the queue: destroyed after it has finished its work.
  DeviceBuffer param_shard_;
  DeviceBuffer full_params_;
  DeviceBuffer full_grads_;
  DeviceBuffer grad_shard_;
  // With offload_optimizer: the fp32 gradient shard in host memory instead of grad_shard_.
  offload::HostShardBuffer host_grad_shard_;
  float* grad_shard_data_ = nullptr;  // grad_shard_ or host_grad_shard_ (stages 1-3)
  // With offload_param cpu: the parameter shard in host memory instead of param_shard_.
  offload::HostShardBuffer host_param_shard_;
  // The rank's offload tiers (one I/O engine, one pinned staging budget): declared before the
  // parameter store and the optimizer, which borrow it.
  std::unique_ptr<offload::RankTiers> tiers_;
  // With offload_param nvme: the parameter shard's only home (param_shard_data_ is null).
  std::unique_ptr<offload::NvmeParamStore> param_store_;
  void* param_shard_data_ = nullptr;  // param_shard_, or full_params_ in stage 0 / f32
  std::unique_ptr<ZeroOptimizer> adam_;
  std::unique_ptr<CommQueue> queue_;
  std::unique_ptr<ParameterCoordinator> coordinator_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<Hooks> hooks_;
  std::unique_ptr<StepGuard> guard_;
  std::unique_ptr<DeviceSegments> extract_owned_;  // stage 1, device-resident gradient shard
  std::unique_ptr<ParameterPublisher> publisher_;  // stages 0-2
  model::UnitHooks* user_hooks_ = nullptr;
  // The tensor × pipeline peers of this data rank (null when created over a plain world), and
  // the parameters this rank accounts for in the gradient norm (step_guard.h) and checkpoints:
  // those it is the first holder of (TensorSharding::FirstHolder): on tensor rank 0 all (empty),
  // elsewhere its pieces of split ones, each shared piece on its share group's first rank only.
  Comm* model_parallel_ = nullptr;
  NormCounted counted_;
  // Sequence parallelism (and a single replicated key/value head): the tensor group, and each
  // unit's parameters whose gradients are partial sums over it (summed before the data-parallel
  // reduction).
  std::unique_ptr<parallel::TensorComm> sp_comm_;
  std::vector<std::vector<int>> partial_grads_of_unit_;
  // Key/value heads shared by groups of tensor ranks: this rank's share group, and each unit's
  // shared pieces, whose gradients are partial sums over it (summed with the others).
  std::unique_ptr<Comm> share_group_;
  std::unique_ptr<parallel::TensorComm> share_comm_;
  std::vector<std::vector<int>> shared_grads_of_unit_;
  bool boundary_ = false;  // the reducer's pass is the step's last micro-batch
  // A tied LM head split over the pipeline (first and last stage only): those two stages' group,
  // and this stage's copy of the table.
  std::unique_ptr<Comm> tied_ends_;
  std::unique_ptr<parallel::TensorComm> tied_comm_;
  int tied_param_ = -1;
  int world_rank_ = 0;  // names this rank's swap files
  // A pipelined pass is open (BeginPipelinedPass), and the micro-batches it back-propagated.
  bool pipelined_ = false;
  int64_t pipelined_backwards_ = 0;
  std::vector<int64_t> unit_finals_;  // per unit: its micro-batches with final gradients
  // Per unit: the parameters a split backward leaves to the backward-weight (stages 2-3).
  std::vector<std::vector<int>> deferred_params_;
  int64_t micro_batches_ = 0;              // of the current step
  PassKind pass_kind_ = PassKind::kTrain;  // of the pass running
  // Start of the unit the compute stream runs, in the trace: written and read by the stream.
  std::shared_ptr<int64_t> compute_start_ns_ = std::make_shared<int64_t>(0);
  Status broken_;
};

}  // namespace sluice::zero
