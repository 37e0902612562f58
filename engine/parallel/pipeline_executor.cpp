#include "engine/parallel/pipeline_executor.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/model/model_stage.h"
#include "engine/parallel/schedule_validation.h"
#include "runtime/check.h"
#include "runtime/logging.h"

namespace sluice::parallel {
namespace {

// Hidden states and their gradients travel as the model computes them (Model<float>).
constexpr DType kHiddenDType = DType::kF32;

// The role a virtual stage needs, in the words of model_stage.h.
std::string_view RoleOf(int virtual_stage, int last) {
  if (virtual_stage == 0 && virtual_stage == last) return "the whole model";
  if (virtual_stage == 0) return "the first layers (embeddings and token ids)";
  if (virtual_stage == last) return "the last layers (final norm, head and loss)";
  return "neither the first nor the last layer";
}

}  // namespace

template <typename T>
Result<std::unique_ptr<PipelineExecutor<T>>> PipelineExecutor<T>::Create(
    PipelineSchedule schedule, std::vector<model::ModelChunk<T>*> chunks, zero::CommQueue& queue,
    PipelineExecutorOptions options) {
  const std::string_view kind = ScheduleKindName(schedule.kind);
  SLUICE_RETURN_IF_ERROR(
      Status(ValidateSchedule(schedule)).WithContext(fmt::format("pipeline executor ({})", kind)));
  SLUICE_RETURN_IF_ERROR(CheckTransferTags(schedule.micro_batches, schedule.chunks));
  Comm& comm = queue.comm();
  if (comm.size() != schedule.stages) {
    return InvalidArgumentError(
        "pipeline executor: a {}-stage schedule over communicator {} of {} ranks; its queue "
        "needs the pipeline group (pipeline.stages ranks)",
        schedule.stages, comm.name(), comm.size());
  }
  if (comm.native_stream() != nullptr) {
    return UnimplementedError(
        "pipeline executor: communicator {} is stream-ordered ({}); pipeline transfers run on "
        "MPI communicators only",
        comm.name(), comm.backend_name());
  }
  const int stage = comm.rank();
  if (static_cast<int>(chunks.size()) != schedule.chunks) {
    return InvalidArgumentError(
        "pipeline executor: stage {} holds {} model chunks, the {} "
        "schedule runs {} per stage",
        stage, chunks.size(), kind, schedule.chunks);
  }
  const int last = schedule.virtual_stages() - 1;
  for (int c = 0; c < schedule.chunks; ++c) {
    SLUICE_CHECK(chunks[c] != nullptr) << "chunk " << c;
    const model::ModelChunk<T>& chunk = *chunks[c];
    const model::ModelOptions& model_options = chunk.model().options();
    const int k = schedule.VirtualStage(stage, c);
    const std::string where = model::DescribeModelStage(model_options, chunk.stage());
    if (chunk.first_stage() != (k == 0) || chunk.last_stage() != (k == last)) {
      return InvalidArgumentError(
          "pipeline executor: chunk {} of stage {} is virtual stage {} of {}, which holds {}, but "
          "the model given holds {}; pass each stage's chunks in chunk order, chunk c holding "
          "virtual stage c * {} + {}",
          c, stage, k, last + 1, RoleOf(k, last), where, schedule.stages, stage);
    }
    // Virtual stage c * P + r comes after (c - 1) * P + r: its layers too.
    if (c > 0 && chunk.stage().begin_layer < chunks[c - 1]->stage().end_layer) {
      return InvalidArgumentError(
          "pipeline executor: chunk {} of stage {} holds {}, not after chunk {}'s {}; pass each "
          "stage's chunks in chunk order, chunk c holding virtual stage c * {} + {}",
          c, stage, where, c - 1,
          model::DescribeModelStage(chunks[c - 1]->model().options(), chunks[c - 1]->stage()),
          schedule.stages, stage);
    }
    if (model_options.d_model != chunks[0]->model().options().d_model) {
      return InvalidArgumentError(
          "pipeline executor: chunk {} of stage {} has d_model {}, chunk 0 "
          "{}",
          c, stage, model_options.d_model, chunks[0]->model().options().d_model);
    }
    const Stream& stream = chunk.model().stream();
    if (&stream.device() != &queue.device()) {
      return InvalidArgumentError(
          "pipeline executor: chunk {} of stage {} runs on {}, the comm queue on {}", c, stage,
          stream.device().name(), queue.device().name());
    }
    if (options.batch < 1 || options.seq < 1 || options.seq > model_options.seq_len) {
      return InvalidArgumentError(
          "pipeline executor: micro-batches of {} sequences of {} tokens; need at least 1 "
          "sequence of 1 to model.seq_len = {} tokens",
          options.batch, options.seq, model_options.seq_len);
    }
  }
  std::unique_ptr<PipelineExecutor> executor(
      new PipelineExecutor(std::move(schedule), std::move(chunks), queue, options));
  SLUICE_ASSIGN_OR_RETURN(executor->compute_done_, queue.device().CreateEvent());
  return executor;
}

template <typename T>
PipelineExecutor<T>::PipelineExecutor(PipelineSchedule schedule,
                                      std::vector<model::ModelChunk<T>*> chunks,
                                      zero::CommQueue& queue, PipelineExecutorOptions options)
    : schedule_(std::move(schedule)),
      chunks_(std::move(chunks)),
      queue_(&queue),
      options_(options),
      stage_(queue.comm().rank()),
      link_(queue) {
  for (model::ModelChunk<T>* chunk : chunks_) {
    if (std::find(models_.begin(), models_.end(), &chunk->model()) == models_.end()) {
      models_.push_back(&chunk->model());
    }
  }
}

template <typename T>
PipelineExecutor<T>::~PipelineExecutor() {
  (void)queue_->Synchronize();
  (void)link_.AbandonSends();
  for (model::Model<T>* model : models_) (void)model->stream().Synchronize();
  if (!stranded_.empty()) {
    // Operations a timeout left posted may still read or write these buffers until the late
    // ranks arrive.
    Status drained = queue_->comm().Drain();
    if (!drained.ok()) {
      SLUICE_LOG(kError, "pipeline",
                 "stage {}: leaving {} transfer buffers allocated for operations that never "
                 "completed: {}",
                 stage_, stranded_.size(), drained.ToString());
      (void)new std::vector<DeviceBuffer>(std::move(stranded_));
    }
  }
}

template <typename T>
size_t PipelineExecutor<T>::hidden_elements() const {
  return static_cast<size_t>(options_.batch * options_.seq * models_[0]->options().d_model);
}

template <typename T>
std::string PipelineExecutor<T>::Name(const PipeInstruction& in) const {
  return fmt::format("pipeline stage {} of {}: {}", stage_, schedule_.stages, in.Describe());
}

template <typename T>
Result<DeviceBuffer> PipelineExecutor<T>::AllocateHidden(std::string_view what) {
  Result<DeviceBuffer> buffer =
      queue_->device().Allocate(hidden_elements() * sizeof(T), MemoryCategory::kBuffers);
  if (!buffer.ok()) return Status(buffer.status()).WithContext(what);
  return buffer;
}

template <typename T>
Status PipelineExecutor<T>::ChainCompute(int chunk) {
  if (last_compute_chunk_ < 0 || &StreamOf(last_compute_chunk_) == &StreamOf(chunk)) {
    return OkStatus();
  }
  return StreamOf(chunk).WaitEvent(*compute_done_);
}

template <typename T>
Status PipelineExecutor<T>::NoteCompute(int chunk) {
  last_compute_chunk_ = chunk;
  if (models_.size() == 1) return OkStatus();
  return compute_done_->Record(StreamOf(chunk));
}

template <typename T>
Result<PipelineStepResult> PipelineExecutor<T>::RunStep(const PipelineStepHooks& hooks) {
  if (!failed_.ok()) {
    return FailedPreconditionError(
        "pipeline stage {}: an earlier step failed, leaving its streams and communicator "
        "unusable: {}",
        stage_, failed_.ToString());
  }
  passes_ended_ = false;
  last_compute_chunk_ = -1;
  for (model::Model<T>* model : models_) {
    Status begun = model->BeginPass(/*gradients=*/true);
    if (!begun.ok()) {
      return Fail(std::move(begun).WithContext(
          fmt::format("pipeline stage {}: beginning the chunks' pass", stage_)));
    }
  }
  PipelineStepResult result;
  for (const PipeInstruction& in : schedule_.stage_instructions[stage_]) {
    Status status = Execute(in, hooks, result);
    if (!status.ok()) return Fail(std::move(status));
  }
  SLUICE_CHECK(passes_ended_) << "a validated schedule ends with its tail";
  return result;
}

template <typename T>
Status PipelineExecutor<T>::Execute(const PipeInstruction& in, const PipelineStepHooks& hooks,
                                    PipelineStepResult& result) {
  const auto call = [&](const std::function<Status()>& hook) -> Status {
    if (!passes_ended_) SLUICE_RETURN_IF_ERROR(FinishPasses(result));
    if (!hook) return OkStatus();
    Status status = hook();
    if (!status.ok()) return std::move(status).WithContext(Name(in));
    return OkStatus();
  };
  Status status;
  switch (in.op) {
    case PipeOp::kLoadMicroBatch:
      status = Load(in, hooks);
      break;
    case PipeOp::kForward:
      status = Forward(in);
      break;
    case PipeOp::kBackward:
    case PipeOp::kBackwardInput:
      status = Backward(in);
      break;
    case PipeOp::kBackwardWeight:
      status = BackwardWeight(in);
      break;
    case PipeOp::kSendActivation:
    case PipeOp::kSendGrad:
      status = Send(in);
      break;
    case PipeOp::kRecvActivation:
    case PipeOp::kRecvGrad:
      status = Recv(in);
      break;
    case PipeOp::kReduceTiedGrads:
      return call(hooks.reduce_tied_grads);
    case PipeOp::kReduceGrads:
      return call(hooks.reduce_grads);
    case PipeOp::kOptimizerStep:
      return call(hooks.optimizer_step);
  }
  if (!status.ok()) return std::move(status).WithContext(Name(in));
  if (IsCompute(in.op)) CountInFlight(result);
  return OkStatus();
}

template <typename T>
Status PipelineExecutor<T>::Load(const PipeInstruction& in, const PipelineStepHooks& hooks) {
  if (!hooks.load) {
    return InvalidArgumentError(
        "PipelineStepHooks::load is not set; the first and last virtual "
        "stages take their micro-batches from it");
  }
  SLUICE_ASSIGN_OR_RETURN(PipelineMicroBatch batch, hooks.load(in.micro, in.chunk));
  loaded_[{in.micro, in.chunk}] = batch;
  return OkStatus();
}

template <typename T>
Status PipelineExecutor<T>::Forward(const PipeInstruction& in) {
  const int k = VirtualStage(in.chunk);
  const Key key{in.micro, in.chunk};
  model::ModelChunk<T>& chunk = *chunks_[in.chunk];
  Stream& stream = StreamOf(in.chunk);
  model::StageInput<T> input{.batch = options_.batch, .seq = options_.seq};
  if (k == 0 || k == last_virtual()) {
    auto loaded = loaded_.find(key);
    SLUICE_CHECK(loaded != loaded_.end()) << "a validated schedule loads before the forward";
    if (k == 0) input.tokens = loaded->second.tokens;
    if (k == last_virtual()) input.targets = loaded->second.targets;
    loaded_.erase(loaded);
  }
  SLUICE_RETURN_IF_ERROR(ChainCompute(in.chunk));
  // What the forward reads of the previous virtual stage: released after it (the model copies
  // its input on the stream).
  DeviceBuffer consumed;
  if (k > 0) {
    if (schedule_.StageOf(k - 1) == stage_) {  // one stage: the previous chunk is here
      auto out = activations_out_.find({in.micro, schedule_.ChunkOf(k - 1)});
      SLUICE_CHECK(out != activations_out_.end()) << "the previous chunk's forward ran before";
      consumed = std::move(out->second);
      activations_out_.erase(out);
    } else {
      auto received = activations_in_.find(key);
      SLUICE_CHECK(received != activations_in_.end()) << "a validated schedule receives first";
      SLUICE_RETURN_IF_ERROR(queue_->Join(stream, received->second.ticket));
      consumed = std::move(received->second.buffer);
      activations_in_.erase(received);
    }
    input.hidden = consumed.data_as<T>();
  }
  T* output = nullptr;
  if (k < last_virtual()) {
    SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, AllocateHidden("allocating the stage output"));
    output = buffer.data_as<T>();
    activations_out_[key] = std::move(buffer);
  }
  SLUICE_RETURN_IF_ERROR(chunk.Forward(in.micro, input, output));
  if (consumed.size() > 0) consumed.FreeAsync(stream);
  return NoteCompute(in.chunk);
}

template <typename T>
Status PipelineExecutor<T>::Backward(const PipeInstruction& in) {
  const int k = VirtualStage(in.chunk);
  const Key key{in.micro, in.chunk};
  model::ModelChunk<T>& chunk = *chunks_[in.chunk];
  Stream& stream = StreamOf(in.chunk);
  model::StageOutputGrad<T> grad{.loss_grad =
                                     options_.loss_grad.value_or(1.0 / schedule_.micro_batches)};
  SLUICE_RETURN_IF_ERROR(ChainCompute(in.chunk));
  DeviceBuffer consumed;
  if (k < last_virtual()) {
    if (schedule_.StageOf(k + 1) == stage_) {
      auto out = grads_out_.find({in.micro, schedule_.ChunkOf(k + 1)});
      SLUICE_CHECK(out != grads_out_.end()) << "the next chunk's backward ran before";
      consumed = std::move(out->second);
      grads_out_.erase(out);
    } else {
      auto received = grads_in_.find(key);
      SLUICE_CHECK(received != grads_in_.end()) << "a validated schedule receives first";
      SLUICE_RETURN_IF_ERROR(queue_->Join(stream, received->second.ticket));
      consumed = std::move(received->second.buffer);
      grads_in_.erase(received);
    }
    grad.hidden = consumed.data_as<T>();
  }
  T* input_grad = nullptr;
  if (k > 0) {
    SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                            AllocateHidden("allocating the stage input's gradient"));
    input_grad = buffer.data_as<T>();
    grads_out_[key] = std::move(buffer);
  }
  if (in.op == PipeOp::kBackwardInput) {
    SLUICE_RETURN_IF_ERROR(chunk.BackwardInput(in.micro, grad, input_grad));
  } else {
    SLUICE_RETURN_IF_ERROR(chunk.Backward(in.micro, grad, input_grad));
  }
  if (consumed.size() > 0) consumed.FreeAsync(stream);
  return NoteCompute(in.chunk);
}

template <typename T>
Status PipelineExecutor<T>::BackwardWeight(const PipeInstruction& in) {
  // Nothing crosses stages: the weight gradients read what the backward-input kept.
  SLUICE_RETURN_IF_ERROR(ChainCompute(in.chunk));
  SLUICE_RETURN_IF_ERROR(chunks_[in.chunk]->BackwardWeight(in.micro));
  return NoteCompute(in.chunk);
}

template <typename T>
void PipelineExecutor<T>::CountInFlight(PipelineStepResult& result) const {
  int in_flight = 0;
  int awaiting = 0;
  for (const model::ModelChunk<T>* chunk : chunks_) {
    in_flight += chunk->micro_batches_in_flight();
    awaiting += chunk->micro_batches_awaiting_weight();
  }
  result.peak_in_flight = std::max(result.peak_in_flight, in_flight);
  result.peak_awaiting_weight = std::max(result.peak_awaiting_weight, awaiting);
}

template <typename T>
Status PipelineExecutor<T>::Send(const PipeInstruction& in) {
  const bool activation = in.op == PipeOp::kSendActivation;
  const int k = VirtualStage(in.chunk);
  const int to = activation ? k + 1 : k - 1;
  auto& outputs = activation ? activations_out_ : grads_out_;
  auto out = outputs.find({in.micro, in.chunk});
  SLUICE_CHECK(out != outputs.end()) << "a validated schedule computes before it sends";
  const int peer = schedule_.StageOf(to);
  const int tag = TransferTag(activation ? TransferKind::kActivation : TransferKind::kGrad,
                              in.micro, in.chunk, schedule_.chunks);
  return link_.Send(StreamOf(in.chunk), out->second.data(), hidden_elements(), kHiddenDType, peer,
                    tag, fmt::format("{} to stage {}", Name(in), peer));
}

template <typename T>
Status PipelineExecutor<T>::Recv(const PipeInstruction& in) {
  const bool activation = in.op == PipeOp::kRecvActivation;
  const int k = VirtualStage(in.chunk);
  const int from = activation ? k - 1 : k + 1;
  const int peer = schedule_.StageOf(from);
  const int tag = TransferTag(activation ? TransferKind::kActivation : TransferKind::kGrad,
                              in.micro, schedule_.ChunkOf(from), schedule_.chunks);
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, AllocateHidden("allocating a receive buffer"));
  SLUICE_ASSIGN_OR_RETURN(zero::CommTicket ticket,
                          link_.Recv(buffer.data(), hidden_elements(), kHiddenDType, peer, tag,
                                     fmt::format("{} from stage {}", Name(in), peer)));
  auto& received = activation ? activations_in_ : grads_in_;
  received[{in.micro, in.chunk}] = Received{std::move(buffer), std::move(ticket)};
  return OkStatus();
}

template <typename T>
Status PipelineExecutor<T>::FinishPasses(PipelineStepResult& result) {
  SLUICE_ASSIGN_OR_RETURN(zero::CommTicket sends, link_.FinishSends());
  // The transfers' errors name their instruction and peer themselves.
  SLUICE_RETURN_IF_ERROR(queue_->Wait(sends));
  std::map<int, double> losses;  // only the model holding the last virtual stage has any
  for (model::Model<T>* model : models_) {
    Result<std::map<int, double>> ended = model->EndPass();
    if (!ended.ok()) {
      return Status(ended.status())
          .WithContext(fmt::format("pipeline stage {}: ending the chunks' pass", stage_));
    }
    losses.merge(*ended);
  }
  passes_ended_ = true;
  // Every stream that used them is idle: the comm stream waited for the sends, EndPass
  // synchronized the chunks' streams.
  ReleaseStepBuffers();
  const int root = schedule_.StageOf(last_virtual());
  double loss = 0;
  if (stage_ == root) {
    if (static_cast<int>(losses.size()) != schedule_.micro_batches) {
      return InternalError(
          "pipeline stage {}: the last chunk's pass reports {} losses for {} "
          "micro-batches",
          stage_, losses.size(), schedule_.micro_batches);
    }
    for (const auto& [micro, value] : losses) loss += value;  // in micro-batch order
    loss /= schedule_.micro_batches;
    result.micro_losses = std::move(losses);
  }
  // The double's bits as two f32 elements: a broadcast only copies them.
  static_assert(sizeof(double) == 2 * sizeof(float));
  Status shared = queue_->Run("pipeline loss", [&loss, root](Comm& comm) {
    return comm.Broadcast(&loss, 2, DType::kF32, root);
  });
  if (!shared.ok()) {
    return std::move(shared).WithContext(
        fmt::format("pipeline stage {}: broadcasting the step's loss from stage {}", stage_, root));
  }
  result.loss = loss;
  return OkStatus();
}

template <typename T>
void PipelineExecutor<T>::ReleaseStepBuffers() {
  loaded_.clear();
  activations_in_.clear();
  grads_in_.clear();
  activations_out_.clear();
  grads_out_.clear();
}

template <typename T>
Status PipelineExecutor<T>::Fail(Status error) {
  // Nothing may free a buffer an enqueued transfer or compute still uses: wait for the comm
  // stream (each receive is bounded by the timeout) and the chunks' streams first.
  (void)queue_->Synchronize();
  (void)link_.AbandonSends();
  for (model::Model<T>* model : models_) {
    if (!passes_ended_) (void)model->EndPass();  // drops the micro-batches in flight
    (void)model->stream().Synchronize();
  }
  passes_ended_ = true;
  for (auto* received : {&activations_in_, &grads_in_}) {
    for (auto& [key, transfer] : *received) stranded_.push_back(std::move(transfer.buffer));
  }
  for (auto* outputs : {&activations_out_, &grads_out_}) {
    for (auto& [key, buffer] : *outputs) stranded_.push_back(std::move(buffer));
  }
  ReleaseStepBuffers();
  failed_ = error;
  return error;
}

template class PipelineExecutor<float>;

}  // namespace sluice::parallel
