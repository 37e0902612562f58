// The pipeline executor: runs one stage's instruction list of a PipelineSchedule
// (pipeline_schedule.h) over the model chunks the stage holds, for one optimizer step's worth of
// micro-batches, as DeepSpeed's PipelineEngine interprets its TrainSchedule.
//
//   SLUICE_ASSIGN_OR_RETURN(auto p2p, groups.pipeline().Split(0, groups.pipeline().rank()));
//   SLUICE_ASSIGN_OR_RETURN(auto queue, zero::CommQueue::Create(device, std::move(p2p), true));
//   SLUICE_ASSIGN_OR_RETURN(auto executor, PipelineExecutor<float>::Create(
//       schedule, {&model->chunk(0), &model->chunk(1)}, *queue, {.batch = 4, .seq = 1024}));
//   SLUICE_ASSIGN_OR_RETURN(PipelineStepResult step, executor->RunStep(hooks));
//
// Chunks. Stage r of P holds v model chunks (ModelChunk: of one Model::CreateChunks, or each the
// chunk of a Model of its own); chunk c is virtual stage
// k = c * P + r, so the first virtual stage (layers from 0: embeddings, token ids) is chunk 0 of
// stage 0 and the last (the head and loss) chunk v - 1 of stage P - 1. Activations and their
// gradients cross to neighbouring virtual stages through StageLink (stage_link.h): on the comm
// stream of `queue`, ordered by events against the chunks' compute streams; the host enqueues the
// whole step without blocking and waits once, when the schedule reaches its tail. The compute of a
// stage's chunks runs in the schedule's order, one after the other, as on one GPU stream (chunks
// of one Model share its stream; events chain the streams of different Models).
//
// The step. RunStep opens a pass on every chunk's model, then runs the list: LoadMicroBatch asks
// the caller for the micro-batch's token ids (first virtual stage) or targets (last), Forward and
// Backward run Model::Forward / Backward (backward-input and backward-weight: BackwardInput /
// BackwardWeight; the last virtual stage's backward starts from
// d(objective)/d(micro-batch loss) = loss_grad, 1 / M by default), receives and sends move the
// hidden states. At the first instruction of the tail every compute and transfer of the step has
// been enqueued: the executor waits for the sends, ends the chunks' passes (their hooks'
// BeforePassEnd, the one synchronize) and broadcasts the mean loss, sum over micro-batches in
// order divided by M, from the last stage to the whole pipeline group. Then ReduceTiedGrads,
// ReduceGrads and OptimizerStep call the caller's functions: the gradients are final there, and
// what reduces or steps them (ZeRO) is the caller's, not the executor's. Parameter gradients
// accumulate (+=) in the order the schedule runs the backwards, exactly as a whole model's
// ForwardBackward over the same micro-batches in that order would (pipeline_executor_test).
//
// Memory. A received hidden state is freed on the compute stream after the compute that reads it;
// a sent one stays until the step's sends completed, at the tail: one [batch * seq, d_model]
// buffer per send of the step, small beside the activations the model keeps per micro-batch.
// Transfer buffers are charged to the ledger's buffers category (the model copies what it keeps
// into its activations), as the estimator counts them.
//
// Zero bubble. ZB-H1's backward-input runs Model::BackwardInput: the activation gradient and
// every parameter gradient but the Linears' dW, which wait, with the inputs and output gradients
// they read, for the micro-batch's backward-weight (Model::BackwardWeight; deferred_weight_grads.h
// says what that keeps alive). The send of the input gradient follows the backward-input, as the
// schedule places it: the previous stage's backward never waits for a weight gradient. Each
// parameter's gradient still accumulates over the micro-batches in the order of the backwards
// (ZB-H1 runs both halves in micro-batch order), so the step's gradients equal 1F1B's and the
// whole model's bit for bit (pipeline_executor_test). Unit hooks set on a chunk must accept a
// split backward (UnitHooks::SupportsSplitBackward; the ZeRO engine's do), else the step fails
// at the first backward-input.
//
// Not run. A stream-ordered (NCCL) communicator is refused: the transfers are proven on the MPI
// backend only, where they run as host functions of the comm stream.
//
// Failures. A neighbour that stops (dead, hung, or failed its own step) makes this stage's
// receive from it time out after the communicator's timeout (run.comm_timeout): RunStep fails
// with DeadlineExceeded naming this stage, the instruction and the peer stage. A failed step
// leaves the chunks' streams and the comm stream with their sticky errors, so the executor
// refuses further steps (FailedPrecondition naming the first error); it keeps the transfer
// buffers the communicator may still use until Comm::Drain() succeeds (at the latest when the
// executor is destroyed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "engine/parallel/pipeline_schedule.h"
#include "engine/parallel/stage_link.h"
#include "engine/zero/comm_queue.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::parallel {

// What LoadMicroBatch brings: host arrays of batch * seq int32 values, alive until RunStep
// returns (the model copies them as the forward is enqueued).
struct PipelineMicroBatch {
  const int32_t* tokens = nullptr;   // the first virtual stage's input; null elsewhere
  const int32_t* targets = nullptr;  // the last virtual stage's targets; null elsewhere
};

// The caller's part of a step. A null function is a step that has nothing to do there.
struct PipelineStepHooks {
  // Micro-batch `micro`'s inputs for chunk `chunk` (the first or last virtual stage).
  std::function<Result<PipelineMicroBatch>(int micro, int chunk)> load;
  // Sums what is tied across stages: a tied LM head away from the embeddings reads a mirror of
  // the token table (ParameterInfo::mirror), whose gradient the caller adds to the table's.
  std::function<Status()> reduce_tied_grads;
  std::function<Status()> reduce_grads;
  std::function<Status()> optimizer_step;
};

struct PipelineExecutorOptions {
  int64_t batch = 1;  // sequences per micro-batch
  // Tokens per sequence, the same for every micro-batch: a receiver sizes its buffer from it.
  int64_t seq = 1;
  // d(objective)/d(each micro-batch's mean loss); unset: 1 / micro-batches (the mean).
  std::optional<double> loss_grad;
};

struct PipelineStepResult {
  // The mean of the micro-batches' losses, on every stage of the pipeline.
  double loss = 0;
  // Each micro-batch's loss, by micro-batch: on the last stage only (empty elsewhere).
  std::map<int, double> micro_losses;
  // This stage's peaks over the step, all its chunks together: micro-batches between their
  // forward and (input) backward, holding all their activations (GPipe: M; 1F1B and ZB-H1:
  // min(P - r, M) on stage r), and micro-batches between backward-input and backward-weight,
  // holding the linears' inputs and output gradients only (ZB-H1; 0 for the others).
  int peak_in_flight = 0;
  int peak_awaiting_weight = 0;
};

template <typename T>
class PipelineExecutor {
 public:
  // Checks, without communicating: the schedule is valid (ValidateSchedule); `queue`'s
  // communicator has schedule.stages ranks (this stage is its rank) and is not stream-ordered;
  // `chunks` holds schedule.chunks model chunks in chunk order whose roles match their virtual
  // stages, with the same d_model; batch and seq fit the models; the tags fit (CheckTransferTags).
  // The models and the queue must outlive the executor; the caller keeps the models' hooks and
  // bindings. The queue carries the executor's transfers only while a step runs (a receive holds it
  // until its data arrives): give it a communicator of its own (Comm::Split of the pipeline group).
  static Result<std::unique_ptr<PipelineExecutor>> Create(PipelineSchedule schedule,
                                                          std::vector<model::ModelChunk<T>*> chunks,
                                                          zero::CommQueue& queue,
                                                          PipelineExecutorOptions options);
  ~PipelineExecutor();

  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // One step: this stage's list, in order. An error names the stage and the instruction.
  Result<PipelineStepResult> RunStep(const PipelineStepHooks& hooks);

  const PipelineSchedule& schedule() const { return schedule_; }
  int stage() const { return stage_; }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  struct Received {
    DeviceBuffer buffer;
    zero::CommTicket ticket;
  };

  PipelineExecutor(PipelineSchedule schedule, std::vector<model::ModelChunk<T>*> chunks,
                   zero::CommQueue& queue, PipelineExecutorOptions options);

  Status Execute(const PipeInstruction& in, const PipelineStepHooks& hooks,
                 PipelineStepResult& result);
  Status Load(const PipeInstruction& in, const PipelineStepHooks& hooks);
  Status Forward(const PipeInstruction& in);
  // Backward, or backward-input (Model::BackwardInput).
  Status Backward(const PipeInstruction& in);
  Status BackwardWeight(const PipeInstruction& in);
  // After a compute: the step's peaks of micro-batches held (PipelineStepResult).
  void CountInFlight(PipelineStepResult& result) const;
  Status Send(const PipeInstruction& in);
  Status Recv(const PipeInstruction& in);
  // The end of the step's compute and transfers: the sends waited for, the passes ended, the
  // loss broadcast, the step's buffers released.
  Status FinishPasses(PipelineStepResult& result);
  // After `error`: waits for the comm stream, gives up pending sends, drops the open passes and
  // keeps the transfer buffers for the communicator (see Failures).
  Status Fail(Status error);

  // Orders chunk `chunk`'s stream after the stage's previous compute (another chunk's stream).
  Status ChainCompute(int chunk);
  Status NoteCompute(int chunk);
  Result<DeviceBuffer> AllocateHidden(std::string_view what);
  Stream& StreamOf(int chunk) const { return chunks_[chunk]->model().stream(); }
  int VirtualStage(int chunk) const { return schedule_.VirtualStage(stage_, chunk); }
  int last_virtual() const { return schedule_.virtual_stages() - 1; }
  size_t hidden_elements() const;
  std::string Name(const PipeInstruction& in) const;
  void ReleaseStepBuffers();

  PipelineSchedule schedule_;
  std::vector<model::ModelChunk<T>*> chunks_;
  std::vector<model::Model<T>*> models_;  // the chunks' models, each once, in chunk order
  zero::CommQueue* queue_;
  PipelineExecutorOptions options_;
  int stage_ = 0;
  StageLink link_;
  std::unique_ptr<Event> compute_done_;
  int last_compute_chunk_ = -1;
  Status failed_;  // the first failed step's error: every later step is refused
  bool passes_ended_ = false;

  // The step's state.
  std::map<Key, PipelineMicroBatch> loaded_;
  std::map<Key, Received> activations_in_;
  std::map<Key, Received> grads_in_;
  std::map<Key, DeviceBuffer> activations_out_;  // kept until the sends completed
  std::map<Key, DeviceBuffer> grads_out_;
  // Transfer buffers a failed step left to the communicator (see Failures).
  std::vector<DeviceBuffer> stranded_;
};

// Model<float> only, the training path's (hidden states travel as f32).
extern template class PipelineExecutor<float>;

}  // namespace sluice::parallel
