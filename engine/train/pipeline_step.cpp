#include "engine/train/pipeline_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/estimate/partition_weights.h"
#include "engine/parallel/layer_partition.h"
#include "engine/parallel/stage_link.h"
#include "engine/train/flops.h"
#include "runtime/check.h"
#include "runtime/trace.h"

namespace sluice::train {
namespace {

// Hidden states travel as the model computes them (Model<float>).
constexpr DType kHiddenDType = DType::kF32;

}  // namespace

Result<std::vector<model::ModelStage>> PipelineChunksOf(const Config& config,
                                                        const model::ModelOptions& options,
                                                        int stage,
                                                        const estimate::LayerTimes* times) {
  const int stages = config.parallel.pipeline;
  if (stages <= 1) return std::vector<model::ModelStage>{model::WholeModelStage(options)};
  const int chunks = std::max(1, config.parallel.chunks);
  SLUICE_ASSIGN_OR_RETURN(const parallel::PartitionSpec spec,
                          parallel::ParsePartitionMethod(config.parallel.partition_method,
                                                         "pipeline.partition_method"));
  // The estimator's weights, so that `sluice estimate` plans the stages training builds.
  SLUICE_ASSIGN_OR_RETURN(const std::vector<int64_t> weights,
                          estimate::PartitionWeights(options, spec, times, config.model.seq_len));
  const std::string parts_key =
      chunks == 1 ? std::string("pipeline.stages")
                  : fmt::format("pipeline.stages {} x pipeline.chunks {}", stages, chunks);
  SLUICE_ASSIGN_OR_RETURN(
      const std::vector<int64_t> bounds,
      parallel::PartitionLayers(weights, stages * chunks, spec.method, parts_key));
  SLUICE_CHECK(stage >= 0 && stage < stages) << "stage " << stage << " of " << stages;
  std::vector<model::ModelStage> ranges;
  for (int c = 0; c < chunks; ++c) {
    const int k = c * stages + stage;  // the virtual stage of chunk c (pipeline_schedule.h)
    ranges.push_back({bounds[k], bounds[k + 1]});
  }
  return ranges;
}

Result<parallel::PipelineSchedule> PipelineScheduleOf(const Config& config) {
  const std::string& name = config.parallel.schedule;
  parallel::ScheduleKind kind;
  if (name == "1f1b") {
    kind = parallel::ScheduleKind::kOneFOneB;
  } else if (name == "gpipe") {
    kind = parallel::ScheduleKind::kGPipe;
  } else if (name == "interleaved-1f1b") {
    kind = parallel::ScheduleKind::kInterleaved1F1B;
  } else if (name == "zb-h1") {
    kind = parallel::ScheduleKind::kZeroBubbleH1;
  } else {
    return InvalidArgumentError(
        "pipeline.schedule \"{}\": use 1f1b, gpipe, interleaved-1f1b or zb-h1", name);
  }
  const int64_t micro_batches = config.batch.gradient_accumulation_steps;
  if (micro_batches > std::numeric_limits<int>::max()) {
    return InvalidArgumentError(
        "gradient_accumulation_steps = {}: too many micro-batches for a pipeline step",
        micro_batches);
  }
  const int chunks = kind == parallel::ScheduleKind::kInterleaved1F1B ? config.parallel.chunks : 1;
  Result<parallel::PipelineSchedule> schedule = parallel::MakePipelineSchedule(
      kind, config.parallel.pipeline, static_cast<int>(micro_batches), chunks);
  if (!schedule.ok()) {
    return Status(schedule.status())
        .WithContext(
            fmt::format("the {} schedule of pipeline.stages = {}, pipeline.chunks = {} and "
                        "gradient_accumulation_steps = {}",
                        name, config.parallel.pipeline, chunks, micro_batches));
  }
  return schedule;
}

Result<std::unique_ptr<PipelineRunner>> PipelineRunner::Create(
    const Config& config, const parallel::ProcessGroups& groups, Device& device,
    model::Model<float>& model, zero::ZeroEngine& zero) {
  if (device.kind() != DeviceKind::kCpu) {
    return UnimplementedError(
        "pipeline.stages = {} on device.type {}: the pipeline's transfers run on MPI over host "
        "memory only so far; use device.type cpu or pipeline.stages 1",
        config.parallel.pipeline, device.name());
  }
  SLUICE_ASSIGN_OR_RETURN(parallel::PipelineSchedule schedule, PipelineScheduleOf(config));
  std::unique_ptr<PipelineRunner> runner(
      new PipelineRunner(config, groups, device, model, zero, std::move(schedule)));
  // The executor's transfers on a communicator of their own (pipeline_executor.h).
  Result<std::unique_ptr<Comm>> p2p = groups.pipeline().Split(0, groups.pipeline().rank());
  if (!p2p.ok()) {
    return Status(p2p.status()).WithContext("creating the pipeline's point-to-point communicator");
  }
  SLUICE_ASSIGN_OR_RETURN(runner->queue_,
                          zero::CommQueue::Create(device, std::move(p2p).value(), true));
  return runner;
}

PipelineRunner::PipelineRunner(const Config& config, const parallel::ProcessGroups& groups,
                               Device& device, model::Model<float>& model, zero::ZeroEngine& zero,
                               parallel::PipelineSchedule schedule)
    : groups_(&groups),
      device_(&device),
      model_(&model),
      zero_(&zero),
      schedule_(std::move(schedule)),
      micro_batch_(config.batch.micro_batch_per_gpu),
      seq_len_(config.model.seq_len),
      max_grad_norm_(config.gradient_clipping) {}

// The executor first: it waits for the queue's transfers.
PipelineRunner::~PipelineRunner() { executor_.reset(); }

Result<parallel::PipelineExecutor<float>*> PipelineRunner::ExecutorFor(double loss_grad) {
  if (executor_ != nullptr && executor_loss_grad_ == loss_grad) return executor_.get();
  executor_.reset();
  std::vector<model::ModelChunk<float>*> chunks;
  for (int c = 0; c < model_->chunk_count(); ++c) chunks.push_back(&model_->chunk(c));
  SLUICE_ASSIGN_OR_RETURN(executor_,
                          parallel::PipelineExecutor<float>::Create(
                              schedule_, std::move(chunks), *queue_,
                              {.batch = micro_batch_, .seq = seq_len_, .loss_grad = loss_grad}));
  executor_loss_grad_ = loss_grad;
  return executor_.get();
}

Status PipelineRunner::CheckBatch(const data::Batch& batch, int micro) const {
  if (batch.batch_size == micro_batch_ && batch.seq_len == seq_len_) return OkStatus();
  // The executor sizes every transfer buffer from one shape.
  return InvalidArgumentError(
      "micro-batch {} has {} sequences of {} tokens; a pipeline step runs "
      "train_micro_batch_size_per_gpu = {} sequences of model.seq_len = {} tokens",
      micro, batch.batch_size, batch.seq_len, micro_batch_, seq_len_);
}

Result<EngineStep> PipelineRunner::TrainStep(const StepRequest& request,
                                             const NextTrainBatch& next) {
  const int micro_batches = schedule_.micro_batches;
  EngineStep out;
  batches_.resize(static_cast<size_t>(micro_batches));
  for (int m = 0; m < micro_batches; ++m) {
    data::Batch& batch = batches_[static_cast<size_t>(m)];
    Status loaded = next(&batch);
    if (loaded.ok()) loaded = CheckBatch(batch, m + 1);
    if (!loaded.ok()) {
      return std::move(loaded).WithContext(
          fmt::format("step {}, micro-batch {}", request.step, m + 1));
    }
    const int64_t tokens = batch.batch_size * batch.seq_len;
    out.tokens += tokens;
    out.model_flops += static_cast<double>(tokens) *
                       static_cast<double>(CountModelFlops(model_->options(), seq_len_).per_token);
  }
  SLUICE_ASSIGN_OR_RETURN(parallel::PipelineExecutor<float> * executor,
                          ExecutorFor(request.loss_scale / static_cast<double>(micro_batches)));

  SLUICE_RETURN_IF_ERROR(zero_->BeginPipelinedPass());
  bool zero_pass_open = true;
  std::optional<zero::ZeroStepResult> stepped;
  double optimizer_s = 0.0;
  parallel::PipelineStepHooks hooks;
  hooks.load = [this](int micro, int /*chunk*/) -> Result<parallel::PipelineMicroBatch> {
    const data::Batch& batch = batches_[static_cast<size_t>(micro)];
    return parallel::PipelineMicroBatch{.tokens = batch.inputs.data(),
                                        .targets = batch.targets.data()};
  };
  // The per-unit hooks reduced the gradients during the backwards; the model's pass has ended.
  hooks.reduce_grads = [&]() -> Status {
    zero_pass_open = false;
    return zero_->EndPipelinedPass();
  };
  hooks.optimizer_step = [&]() -> Status {
    const double start = TraceClockSeconds();
    ScopedTraceEvent event(kTraceLaneCompute, fmt::format("optimizer step {}", request.step));
    Result<zero::ZeroStepResult> result = zero_->Step(
        {.lr = request.lr, .loss_scale = request.loss_scale, .max_grad_norm = max_grad_norm_});
    if (!result.ok()) return result.status();
    stepped = *result;
    optimizer_s = TraceClockSeconds() - start;
    return OkStatus();
  };
  const double start = TraceClockSeconds();
  Result<parallel::PipelineStepResult> ran = executor->RunStep(hooks);
  if (!ran.ok()) {
    Status error = Status(ran.status()).WithContext(fmt::format("step {}", request.step));
    return zero_pass_open ? zero_->AbortPipelinedPass(std::move(error)) : error;
  }
  SLUICE_CHECK(stepped.has_value()) << "a pipeline step ends with its optimizer step";
  out.forward_s = TraceClockSeconds() - start - optimizer_s;
  out.optimizer_s = optimizer_s;
  out.grad_norm = stepped->grad_norm;
  out.overflow = stepped->overflow;
  // The last stage's mean over the micro-batches, on every stage: each replica's counts once.
  SLUICE_ASSIGN_OR_RETURN(out.loss, zero_->MeanAcrossRanks(ran->loss));
  const int replicas = groups_->data().size();
  out.tokens *= replicas;
  out.model_flops *= replicas;
  return out;
}

Result<double> PipelineRunner::BroadcastFromLast(double value) {
  const int root = schedule_.stages - 1;
  // The double's bits as two f32 elements: a broadcast only copies them (as the executor's).
  static_assert(sizeof(double) == 2 * sizeof(float));
  SLUICE_RETURN_IF_ERROR(queue_->Run("pipeline evaluation loss", [&value, root](Comm& comm) {
    return comm.Broadcast(&value, 2, DType::kF32, root);
  }));
  return value;
}

// The batch goes forward through the virtual stages in order: chunk c of this stage is virtual
// stage k = c * P + r, which receives from stage r - 1 (mod P) and sends to r + 1 (mod P); the
// host enqueues every chunk's receive, forward and send before it waits, at the pass's end.
Result<double> PipelineRunner::EvaluateBatch(const data::Batch& batch) {
  const int stage = queue_->comm().rank();
  const int last_virtual = schedule_.virtual_stages() - 1;
  const size_t elements =
      static_cast<size_t>(batch.batch_size * batch.seq_len * model_->options().d_model);
  const size_t bytes = elements * sizeof(float);
  // A transfer's tag names the sender's chunk, as the executor's do.
  const auto tag = [this](int virtual_stage) {
    return parallel::TransferTag(parallel::TransferKind::kActivation, 0,
                                 schedule_.ChunkOf(virtual_stage), schedule_.chunks);
  };
  parallel::StageLink link(*queue_);
  std::vector<DeviceBuffer> buffers;  // inputs received and outputs sent
  buffers.reserve(2 * static_cast<size_t>(model_->chunk_count()));  // no reallocation
  const auto allocate = [&](std::string_view what) -> Result<DeviceBuffer*> {
    Result<DeviceBuffer> buffer = device_->Allocate(bytes, MemoryCategory::kBuffers);
    if (!buffer.ok()) return Status(buffer.status()).WithContext(what);
    return &buffers.emplace_back(std::move(buffer).value());
  };
  bool zero_pass_open = false;
  bool model_pass_open = false;
  auto run = [&]() -> Result<double> {
    SLUICE_RETURN_IF_ERROR(zero_->BeginPipelinedPass(zero::PassKind::kEval));
    zero_pass_open = true;
    SLUICE_RETURN_IF_ERROR(model_->BeginPass(/*gradients=*/false));
    model_pass_open = true;
    for (int c = 0; c < model_->chunk_count(); ++c) {
      const int k = schedule_.VirtualStage(stage, c);
      model::StageInput<float> in{.batch = batch.batch_size, .seq = batch.seq_len};
      if (k == 0) in.tokens = batch.inputs.data();
      if (k == last_virtual) in.targets = batch.targets.data();
      if (k > 0) {
        const int from = schedule_.StageOf(k - 1);
        SLUICE_ASSIGN_OR_RETURN(DeviceBuffer * input, allocate("an evaluation input"));
        SLUICE_ASSIGN_OR_RETURN(
            zero::CommTicket received,
            link.Recv(input->data(), elements, kHiddenDType, from, tag(k - 1),
                      fmt::format("evaluation: virtual stage {}'s input from stage {}", k, from)));
        SLUICE_RETURN_IF_ERROR(queue_->Join(model_->stream(), received));
        in.hidden = input->data_as<float>();
      }
      float* output = nullptr;
      if (k < last_virtual) {
        SLUICE_ASSIGN_OR_RETURN(DeviceBuffer * out, allocate("an evaluation output"));
        output = out->data_as<float>();
      }
      SLUICE_RETURN_IF_ERROR(model_->chunk(c).Forward(0, in, output));
      if (k < last_virtual) {
        const int to = schedule_.StageOf(k + 1);
        SLUICE_RETURN_IF_ERROR(
            link.Send(model_->stream(), output, elements, kHiddenDType, to, tag(k),
                      fmt::format("evaluation: virtual stage {}'s output to stage {}", k, to)));
      }
    }
    using Losses = std::map<int, double>;
    model_pass_open = false;
    SLUICE_ASSIGN_OR_RETURN(const Losses losses, model_->EndPass());
    SLUICE_ASSIGN_OR_RETURN(zero::CommTicket sends, link.FinishSends());
    SLUICE_RETURN_IF_ERROR(queue_->Wait(sends));
    zero_pass_open = false;
    SLUICE_RETURN_IF_ERROR(zero_->EndPipelinedPass());
    if (stage != schedule_.StageOf(last_virtual)) return 0.0;
    if (losses.size() != 1) {
      return InternalError("evaluation: the last stage's pass reports {} losses for 1 batch",
                           losses.size());
    }
    return losses.begin()->second;
  };
  Result<double> loss = run();
  if (loss.ok()) return loss;
  if (model_pass_open) (void)model_->EndPass();  // drops the pass, draining the stream
  // Nothing may free a buffer a transfer still uses (stage_link.h, "Failures").
  (void)queue_->Synchronize();
  if (link.AbandonSends() > 0 && !queue_->comm().Drain().ok()) {
    (void)new std::vector<DeviceBuffer>(std::move(buffers));
  }
  Status error = Status(loss.status()).WithContext(fmt::format("pipeline stage {}", stage));
  return zero_pass_open ? zero_->AbortPipelinedPass(std::move(error)) : error;
}

Result<double> PipelineRunner::Evaluate(const NextEvalBatch& next) {
  ScopedTraceEvent event(kTraceLaneCompute, "evaluate");
  double sum = 0.0;
  int64_t batches = 0;
  data::Batch batch;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(const bool more, next(&batch));
    if (!more) break;
    SLUICE_ASSIGN_OR_RETURN(const double loss, EvaluateBatch(batch));
    sum += loss;
    ++batches;
  }
  if (batches == 0) return FailedPreconditionError("the validation split yielded no batches");
  SLUICE_ASSIGN_OR_RETURN(const double mean, BroadcastFromLast(sum / static_cast<double>(batches)));
  return zero_->MeanAcrossRanks(mean);
}

}  // namespace sluice::train
