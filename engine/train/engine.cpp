#include "engine/train/engine.h"

#include <fmt/format.h>

#include <array>

#include "engine/estimate/budget_guard.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/train/flops.h"
#include "engine/train/layer_timing.h"
#include "engine/train/phase_clock.h"
#include "engine/train/pipeline_step.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "engine/train/train_world.h"
#include "engine/zero/word_gather.h"
#include "engine/zero/zero_options.h"
#include "runtime/device/device_factory.h"
#include "runtime/ops/ops_factory.h"
#include "runtime/trace.h"

namespace sluice::train {
Result<parallel::ProcessGrid> PlanEngine(Config* config, int world_size) {
  SLUICE_RETURN_IF_ERROR(FitBatchToWorld(*config, world_size));
  SLUICE_ASSIGN_OR_RETURN(parallel::ProcessGrid grid,
                          parallel::ProcessGrid::Create(world_size, config->parallel.tensor,
                                                        config->parallel.pipeline));
  SLUICE_RETURN_IF_ERROR(estimate::CheckBudgetsBeforeAllocating(*config, config->dp_world_size));
  SLUICE_RETURN_IF_ERROR(estimate::ResolveAutoRatioBudget(config, config->dp_world_size));
  return grid;
}

Engine::Engine(const Config& config, Comm& world)
    : world_(&world),
      accumulation_(config.batch.gradient_accumulation_steps),
      max_grad_norm_(config.gradient_clipping) {}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Create(const Config& config, Comm& world,
                                               const parallel::ProcessGrid& grid) {
  std::unique_ptr<Engine> engine(new Engine(config, world));
  SLUICE_ASSIGN_OR_RETURN(engine->groups_, parallel::ProcessGroups::Create(world, grid));
  // A rank that failed a phase alone would otherwise leave the others waiting in the next
  // collective until run.comm_timeout.
  SLUICE_RETURN_IF_ERROR(
      AgreeAcrossRanks(world, engine->BuildDevice(config), "setting up the device"));
  SLUICE_ASSIGN_OR_RETURN(const std::optional<estimate::LayerTimes> times,
                          engine->PartitionTimes(config));
  SLUICE_RETURN_IF_ERROR(
      AgreeAcrossRanks(world, engine->BuildModel(config, times), "building the model"));
  SLUICE_RETURN_IF_ERROR(
      AgreeAcrossRanks(world, engine->BuildZero(config), "creating the ZeRO engine"));
  return engine;
}

Status Engine::BuildDevice(const Config& config) {
  const bool cuda = config.device.type == DeviceType::kCuda;
  if (!cuda && !config.device.memory_limit.has_value()) {
    return InvalidArgumentError(
        "device.memory_limit is not set: the cpu device needs a capacity (e.g. 512MiB)");
  }
  if (cuda && groups_->grid().shape().tensor > 1) {
    // The tensor group's all-reduces run on the host (MPI), not on NCCL, so far.
    return UnimplementedError(
        "tensor_parallel.autotp_size = {} on a cuda device: tensor-parallel collectives do not run "
        "on NCCL yet; set it to 1 (or device.type cpu)",
        groups_->grid().shape().tensor);
  }
  DeviceOptions device_options;
  device_options.kind = cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  device_options.index = config.device.index;
  // A GPU without a limit offers its whole memory.
  device_options.memory_limit_bytes = static_cast<uint64_t>(config.device.memory_limit.value_or(0));
  SLUICE_ASSIGN_OR_RETURN(device_options.memory_protection,
                          ParseDeviceMemoryProtection(config.device.memory_protection));
  SLUICE_ASSIGN_OR_RETURN(device_, CreateDevice(device_options));
  allocator_ = std::make_unique<model::DeviceAllocator>(*device_);
  SLUICE_ASSIGN_OR_RETURN(ops_,
                          ops::CreateOpsBackend(*device_, {.cpu_threads = config.device.threads}));
  if (config.run.profile_ops) {
    auto profiled = std::make_unique<ops::ProfiledOpsBackend>(std::move(ops_));
    op_profile_ = profiled.get();
    ops_ = std::move(profiled);
  }
  SLUICE_ASSIGN_OR_RETURN(matmul_precision_,
                          ops::ParseMatmulPrecision(config.model.matmul_precision));
  return ops_->SetMatmulPrecision(matmul_precision_).WithContext("model.matmul_precision");
}

Result<model::ModelOptions> Engine::ModelOptionsOf(const Config& config) const {
  SLUICE_ASSIGN_OR_RETURN(model::ModelOptions model_options,
                          ModelOptionsFromConfig(config, PrecisionOf(config.model.dtype)));
  // The model computes on the fp32 copy the engine binds; the engine keeps the parameter dtype.
  model_options.param_dtype = DType::kF32;
  // This rank's piece of the layers split over its tensor group (tensor_plan.h), of its
  // pipeline stage's layers.
  model_options.tensor_parallel_rank = groups_->coords().tensor;
  return model_options;
}

Result<std::optional<estimate::LayerTimes>> Engine::PartitionTimes(const Config& config) {
  // The same config on every rank: all take the same branch.
  if (config.parallel.pipeline <= 1) return std::optional<estimate::LayerTimes>();
  SLUICE_ASSIGN_OR_RETURN(const parallel::PartitionSpec spec,
                          parallel::ParsePartitionMethod(config.parallel.partition_method,
                                                         "pipeline.partition_method"));
  if (spec.method != parallel::PartitionMethod::kTime) {
    return std::optional<estimate::LayerTimes>();
  }
  // Rank 0 measures, alone on the device's cores, and every rank partitions by its times.
  std::array<double, 3> times = {0, 0, 0};
  Status measured = OkStatus();
  if (world_->rank() == 0) {
    Result<estimate::LayerTimes> t = [&]() -> Result<estimate::LayerTimes> {
      SLUICE_ASSIGN_OR_RETURN(const model::ModelOptions options, ModelOptionsOf(config));
      return MeasureLayerTimes(options, *ops_, config.batch.micro_batch_per_gpu,
                               config.model.seq_len);
    }();
    if (t.ok()) {
      times = {t->embeddings, t->block, t->tail};
      SLUICE_LOG(kInfo, "pipeline",
                 "pipeline.partition_method time: per micro-batch, forward and backward, the "
                 "embeddings take {:.3f} ms, a decoder block {:.3f} ms, the final norm, head "
                 "and loss {:.3f} ms",
                 t->embeddings, t->block, t->tail);
    }
    measured = t.status();
  }
  SLUICE_RETURN_IF_ERROR(AgreeAcrossRanks(*world_, measured, "timing the layers"));
  SLUICE_RETURN_IF_ERROR(zero::SumInRankOrder(*world_, times));  // rank 0's, everywhere
  return std::optional<estimate::LayerTimes>(estimate::LayerTimes{times[0], times[1], times[2]});
}

Status Engine::BuildModel(const Config& config, const std::optional<estimate::LayerTimes>& times) {
  SLUICE_ASSIGN_OR_RETURN(const model::ModelOptions model_options, ModelOptionsOf(config));
  Comm* tensor = groups_->grid().shape().tensor > 1 ? &groups_->tensor() : nullptr;
  SLUICE_ASSIGN_OR_RETURN(const std::vector<model::ModelStage> chunks,
                          PipelineChunksOf(config, model_options, groups_->coords().pipeline,
                                           times.has_value() ? &*times : nullptr));
  Result<std::unique_ptr<model::Model<float>>> model = model::Model<float>::CreateChunks(
      model_options, chunks, *allocator_, *ops_, model::ModelStorage::kExternal, tensor);
  if (!model.ok()) return Status(model.status()).WithContext("building the model");
  model_ = std::move(model).value();
  return OkStatus();
}

Status Engine::BuildZero(const Config& config) {
  SLUICE_ASSIGN_OR_RETURN(zero::ZeroOptions options, zero::ZeroOptionsFromConfig(config));
  Result<std::unique_ptr<zero::ZeroEngine>> engine =
      zero::ZeroEngine::Create(options, *model_, *groups_, *device_);
  if (!engine.ok()) return Status(engine.status()).WithContext("creating the ZeRO engine");
  zero_ = std::move(engine).value();
  if (groups_->grid().shape().pipeline > 1) {
    SLUICE_ASSIGN_OR_RETURN(pipeline_,
                            PipelineRunner::Create(config, *groups_, *device_, *model_, *zero_));
  }
  return OkStatus();
}

Result<EngineStep> Engine::TrainStep(const StepRequest& request, const NextTrainBatch& next) {
  if (pipeline_ != nullptr) return pipeline_->TrainStep(request, next);
  EngineStep out;
  PhaseClock clock(*device_, model_->stream(), static_cast<int>(model_->units().size()) - 1);
  zero_->SetUserHooks(&clock);
  auto micro_batch = [&](int64_t micro) -> Result<double> {
    SLUICE_RETURN_IF_ERROR(next(&batch_));
    SLUICE_RETURN_IF_ERROR(clock.BeginPass());
    SLUICE_ASSIGN_OR_RETURN(
        const double loss,
        zero_->ForwardBackward(batch_.inputs.data(), batch_.targets.data(), batch_.batch_size,
                               batch_.seq_len,
                               request.loss_scale / static_cast<double>(accumulation_)));
    SLUICE_RETURN_IF_ERROR(clock.EndPass(request.step, micro));
    return loss;
  };
  double loss_sum = 0.0;
  for (int64_t micro = 1; micro <= accumulation_; ++micro) {
    Result<double> loss = micro_batch(micro);
    if (!loss.ok()) {
      zero_->SetUserHooks(nullptr);
      return Status(loss.status())
          .WithContext(fmt::format("step {}, micro-batch {}", request.step, micro));
    }
    const int64_t tokens = batch_.batch_size * batch_.seq_len;
    loss_sum += *loss;
    out.tokens += tokens;
    out.model_flops +=
        static_cast<double>(tokens) *
        static_cast<double>(CountModelFlops(model_->options(), batch_.seq_len).per_token);
  }
  zero_->SetUserHooks(nullptr);
  out.forward_s = clock.forward_s();
  out.backward_s = clock.backward_s();

  const double optimizer_start = TraceClockSeconds();
  {
    ScopedTraceEvent event(kTraceLaneCompute, fmt::format("optimizer step {}", request.step));
    Result<zero::ZeroStepResult> stepped = zero_->Step(
        {.lr = request.lr, .loss_scale = request.loss_scale, .max_grad_norm = max_grad_norm_});
    if (!stepped.ok()) {
      return Status(stepped.status()).WithContext(fmt::format("optimizer step {}", request.step));
    }
    out.grad_norm = stepped->grad_norm;
    out.overflow = stepped->overflow;
  }
  out.optimizer_s = TraceClockSeconds() - optimizer_start;
  // Every rank ran the same micro-batch shapes; each data-parallel replica's tokens count once.
  SLUICE_ASSIGN_OR_RETURN(out.loss,
                          zero_->MeanAcrossRanks(loss_sum / static_cast<double>(accumulation_)));
  const int replicas = groups_->data().size();
  out.tokens *= replicas;
  out.model_flops *= replicas;
  return out;
}

Result<double> Engine::Evaluate(const NextEvalBatch& next) {
  if (pipeline_ != nullptr) return pipeline_->Evaluate(next);
  ScopedTraceEvent event(kTraceLaneCompute, "evaluate");
  double sum = 0.0;
  int64_t batches = 0;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(const bool more, next(&batch_));
    if (!more) break;
    SLUICE_ASSIGN_OR_RETURN(const double loss,
                            zero_->ForwardLoss(batch_.inputs.data(), batch_.targets.data(),
                                               batch_.batch_size, batch_.seq_len));
    sum += loss;
    ++batches;
  }
  if (batches == 0) return FailedPreconditionError("the validation split yielded no batches");
  return zero_->MeanAcrossRanks(sum / static_cast<double>(batches));
}

}  // namespace sluice::train
