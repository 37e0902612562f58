#include "engine/zero/zero_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/model/init.h"
#include "engine/parallel/sequence_parallel_grads.h"
#include "engine/parallel/tensor_layout.h"
#include "engine/zero/allreduce_reducer.h"
#include "engine/zero/device_segments.h"
#include "engine/zero/offload_options.h"
#include "engine/zero/partition_copy.h"
#include "engine/zero/rank_agreement.h"
#include "engine/zero/reduce_scatter_reducer.h"
#include "engine/zero/word_gather.h"
#include "engine/zero/zeroed_buffer.h"
#include "runtime/check.h"
#include "runtime/comm/comm_factory.h"
#include "runtime/logging.h"
#include "runtime/trace.h"

namespace sluice::zero {
namespace {

// FNV-1a over every parameter's name, size and unit: ranks that built different models (same
// size, other architecture) would gather and reduce mismatched pieces.
int64_t RegistryHash(const model::ParameterRegistry& registry) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  auto mix = [&hash](const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      hash ^= static_cast<const uint8_t*>(data)[i];
      hash *= 0x100000001b3ULL;
    }
  };
  for (const model::ParameterInfo& p : registry.parameters()) {
    mix(p.name.data(), p.name.size());
    mix(&p.numel, sizeof(p.numel));
    mix(&p.unit, sizeof(p.unit));
    mix(&p.tied_to, sizeof(p.tied_to));
  }
  return static_cast<int64_t>(hash);
}

}  // namespace

class ZeroEngine::Hooks final : public model::UnitHooks {
 public:
  explicit Hooks(ZeroEngine& engine) : engine_(&engine) {}
  Status BeforeForward(int unit) override { return engine_->Before({unit, Phase::kForward}); }
  Status AfterForward(int unit) override { return engine_->After({unit, Phase::kForward}); }
  Status BeforeBackward(int unit) override { return engine_->Before({unit, Phase::kBackward}); }
  Status AfterBackward(int unit) override { return engine_->After({unit, Phase::kBackward}); }
  Status BeforePassEnd() override { return engine_->BeforePassEnd(); }
  bool SupportsSplitBackward() const override { return engine_->SupportsSplitBackward(); }
  Status BeforeBackwardWeight(int unit) override { return engine_->BeforeWeight(unit); }
  Status AfterBackwardWeight(int unit) override { return engine_->AfterWeight(unit); }

 private:
  ZeroEngine* engine_;
};

ZeroEngine::ZeroEngine(const ZeroOptions& options, model::Model<float>& model, Device& device)
    : options_(options),
      model_(&model),
      device_(&device),
      placement_(PlaceZeroState(options)),
      binding_(model.registry()) {}

ZeroEngine::~ZeroEngine() {
  if (queue_ != nullptr) (void)queue_->Synchronize();
}

namespace {

// What the engine runs on a GPU so far: one rank, every ZeRO stage, offload to host and NVMe and
// every parameter dtype, its collectives on NCCL. Several ranks need a GPU each and have not
// been run; the refusal names the setting to change.
Status CheckGpuSupported(const Comm& world) {
  if (world.size() <= 1) return OkStatus();
  return UnimplementedError(
      "training on a cuda device runs one rank so far (every rank would need a GPU of its own, "
      "and several GPUs are not tested yet): run one rank");
}

}  // namespace

Result<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(const ZeroOptions& options,
                                                       model::Model<float>& model, Comm& world,
                                                       Device& device) {
  return CreateOver(options, model, world, nullptr, device);
}

Result<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(const ZeroOptions& options,
                                                       model::Model<float>& model,
                                                       const parallel::ProcessGroups& groups,
                                                       Device& device) {
  return CreateOver(options, model, groups.data(), &groups, device);
}

Result<std::unique_ptr<ZeroEngine>> ZeroEngine::CreateOver(const ZeroOptions& options,
                                                           model::Model<float>& model, Comm& data,
                                                           const parallel::ProcessGroups* groups,
                                                           Device& device) {
  // The settings were validated as the config loaded; options made in code must hold what the
  // engine's arithmetic relies on.
  SLUICE_CHECK(options.stage >= 0 && options.stage <= 3) << "zero stage " << options.stage;
  SLUICE_CHECK(options.reduce_bucket_size > 0 && options.allgather_bucket_size > 0 &&
               options.gradient_accumulation_steps > 0)
      << "ZeroOptions not made by ZeroOptionsFromConfig or DefaultZeroOptions";
  if (model.storage() != model::ModelStorage::kExternal) {
    return FailedPreconditionError(
        "the ZeRO engine owns the parameters: create the model with ModelStorage::kExternal");
  }
  if (device.kind() != DeviceKind::kCpu) SLUICE_RETURN_IF_ERROR(CheckGpuSupported(data));
  if (&model.ops().device() != &device) {
    return InvalidArgumentError("the model runs on device {}, the ZeRO engine was given {}",
                                model.ops().device().name(), device.name());
  }
  std::unique_ptr<ZeroEngine> engine(new ZeroEngine(options, model, device));
  // Swap files are named by the rank in the world: data ranks repeat across tensor peers.
  engine->world_rank_ = groups != nullptr ? groups->world().rank() : data.rank();
  if (groups != nullptr && groups->model_parallel().size() > 1) {
    SLUICE_RETURN_IF_ERROR(engine->SetUpModelParallel(*groups));
  }
  SLUICE_RETURN_IF_ERROR(engine->Build(data));
  return engine;
}

namespace {

// `params` (registry indices) grouped by the unit that holds each, in their order.
std::vector<std::vector<int>> ByUnit(const model::ParameterRegistry& registry,
                                     const std::vector<int>& params) {
  std::vector<std::vector<int>> by_unit(registry.units().size());
  for (const int p : params) {
    by_unit[static_cast<size_t>(registry.parameter(p).unit)].push_back(p);
  }
  return by_unit;
}

}  // namespace

// What the tensor and pipeline peers of this data rank share: which parameters each accounts for
// (the norm, checkpoints), the sequence-parallel partial gradients summed over the tensor group,
// and a tied LM head's table, whose first- and last-stage copies' gradients are summed.
Status ZeroEngine::SetUpModelParallel(const parallel::ProcessGroups& groups) {
  model_parallel_ = &groups.model_parallel();
  const model::ParameterRegistry& registry = model_->registry();
  bool every = true;
  for (const model::ParameterInfo& info : registry.parameters()) {
    // Tensor rank 0 counts every parameter it holds, its peers only their pieces of split ones,
    // a shared piece its share group's first rank alone; a mirror is its owner's to count.
    const bool counts = info.sharding.FirstHolder(groups.coords().tensor) && !info.mirror;
    counted_.push_back(counts);
    every = every && counts;
  }
  if (every) counted_.clear();

  // Sequence parallelism leaves the norms' gradients partial over the tensor ranks.
  const std::vector<int> partial = parallel::PartialGradParameters(registry);
  if (!partial.empty()) {
    Result<std::unique_ptr<parallel::TensorComm>> comm =
        parallel::TensorComm::Create(groups.tensor(), *device_);
    if (!comm.ok()) {
      return Status(comm.status())
          .WithContext("creating the communicator of the sequence-parallel gradients");
    }
    sp_comm_ = std::move(comm).value();
    partial_grads_of_unit_ = ByUnit(registry, partial);
  }
  // Key/value heads shared by groups of tensor ranks (every tensor peer holds the same layers, so
  // all of the tensor group split it, or none).
  const std::vector<int> shared =
      parallel::PartialGradParameters(registry, {}, parallel::PartialOver::kShareGroup);
  if (!shared.empty()) {
    Result<std::unique_ptr<Comm>> group =
        parallel::SplitShareGroup(groups.tensor(), parallel::ShareGroupSize(registry));
    if (!group.ok()) {
      return Status(group.status()).WithContext("creating the shared key/value heads' group");
    }
    share_group_ = std::move(group).value();
    Result<std::unique_ptr<parallel::TensorComm>> comm =
        parallel::TensorComm::Create(*share_group_, *device_);
    if (!comm.ok()) {
      return Status(comm.status()).WithContext("creating the shared key/value heads' group");
    }
    share_comm_ = std::move(comm).value();
    shared_grads_of_unit_ = ByUnit(registry, shared);
  }

  // A tied head split from the embeddings: the first stage's table and the last stage's mirror.
  const int stages = groups.grid().shape().pipeline;
  if (model_->options().tie_embeddings && stages > 1) {
    const int stage = groups.coords().pipeline;
    const bool holds = stage == 0 || stage == stages - 1;
    Result<std::unique_ptr<Comm>> ends = groups.pipeline().Split(holds ? 0 : -1, stage);
    if (!ends.ok()) {
      return Status(ends.status()).WithContext("creating the tied embeddings' communicator");
    }
    if (holds) {
      tied_ends_ = std::move(ends).value();
      Result<std::unique_ptr<parallel::TensorComm>> comm =
          parallel::TensorComm::Create(*tied_ends_, *device_);
      if (!comm.ok()) {
        return Status(comm.status()).WithContext("creating the tied embeddings' communicator");
      }
      tied_comm_ = std::move(comm).value();
      for (int p = 0; p < static_cast<int>(registry.parameters().size()); ++p) {
        const model::ParameterInfo& info = registry.parameter(p);
        if (!info.is_alias() && parallel::IsVocabTable(info.name)) tied_param_ = p;
      }
      SLUICE_CHECK_GE(tied_param_, 0) << "no token table on pipeline stage " << stage;
    }
  }
  return OkStatus();
}

Status ZeroEngine::Build(Comm& world) {
  const model::ParameterRegistry& registry = model_->registry();
  const int stage = options_.stage;
  // Stage 0 keeps everything on every rank: the layout of a world of one.
  const int world_size = stage == 0 ? 1 : world.size();
  const int rank = stage == 0 ? 0 : world.rank();
  layout_ = ShardLayout::Build(registry, world_size, rank,
                               stage == 3 ? options_.stage3_param_persistence_threshold : -1);

  const auto make_comm = [&](Stream& stream) -> Result<std::unique_ptr<Comm>> {
    Result<std::unique_ptr<Comm>> comm = world.Split(0, world.rank());
    if (!comm.ok()) return Status(comm.status()).WithContext("creating the ZeRO communicator");
    if (device_->kind() == DeviceKind::kCpu) return comm;
    // On a GPU the collectives move device memory: NCCL, enqueued on the comm stream itself.
    Result<std::unique_ptr<Comm>> nccl =
        CreateNcclComm(std::move(comm).value(), device_->index(), stream.native());
    if (!nccl.ok()) return Status(nccl.status()).WithContext("creating the ZeRO communicator");
    return nccl;
  };
  SLUICE_ASSIGN_OR_RETURN(queue_, CommQueue::Create(*device_, make_comm, options_.overlap_comm));
  std::vector<AgreedValue> agreed = AgreedValuesOf(options_);
  agreed.push_back({"the model's parameter count", registry.total_elements()});
  agreed.push_back({"the model's unit count", static_cast<int64_t>(registry.units().size())});
  agreed.push_back({"the model's parameter names and shapes (hash)", RegistryHash(registry)});
  SLUICE_RETURN_IF_ERROR(queue_->Run("check config", [&agreed](Comm& comm) {
    return CheckSameOnAllRanks(comm, agreed, "the ZeRO configuration");
  }));

  const size_t total = static_cast<size_t>(registry.total_elements());
  const size_t shard = static_cast<size_t>(layout_.shard_elements());
  const size_t param_size = DTypeSize(options_.param_dtype);
  if (placement_.replicated_params) {
    SLUICE_ASSIGN_OR_RETURN(
        full_params_, AllocateZeroed(compute(), total * sizeof(float), MemoryCategory::kParams,
                                     "the replicated fp32 parameters"));
    for (const PartitionInfo& p : layout_.partitions()) {
      binding_.SetValue(p.param, full_params_.data_as<float>() + p.full_offset);
    }
  }
  if (placement_.replicated_grads) {
    SLUICE_ASSIGN_OR_RETURN(full_grads_,
                            AllocateZeroed(compute(), total * sizeof(float), MemoryCategory::kGrads,
                                           "the replicated fp32 gradients"));
    for (const PartitionInfo& p : layout_.partitions()) {
      binding_.SetGrad(p.param, full_grads_.data_as<float>() + p.full_offset);
    }
  }
  const bool grads_on_host = placement_.grad_shard == StateTier::kHost;
  if (grads_on_host) {
    // The offloaded optimizer reads it in place: reduce-scattered buckets are accumulated
    // straight into host memory as they finish, and no device copy of the shard exists.
    SLUICE_ASSIGN_OR_RETURN(host_grad_shard_, offload::HostShardBuffer::Allocate(
                                                  shard * sizeof(float), MemoryCategory::kGrads,
                                                  "the offloaded fp32 gradient shard"));
    grad_shard_data_ = host_grad_shard_.data_as<float>();
  } else if (placement_.grad_shard == StateTier::kDevice) {
    SLUICE_ASSIGN_OR_RETURN(grad_shard_,
                            AllocateZeroed(compute(), shard * sizeof(float), MemoryCategory::kGrads,
                                           "the fp32 gradient shard"));
    grad_shard_data_ = grad_shard_.data_as<float>();
  }
  const bool host_params = placement_.param_shard == StateTier::kHost;
  // One I/O engine and pinned staging budget for every tier of this rank (made on first use).
  tiers_ = std::make_unique<offload::RankTiers>(RankTiersOptionsOf(options_.aio, world_rank_));
  if (placement_.param_shard == StateTier::kNone) {
    param_shard_data_ = full_params_.data();  // the master weights are the compute copy
  } else if (placement_.param_shard == StateTier::kNvme) {
    // Stage 3 only: no copy of the shard anywhere but NVMe (and the store's bounded cache). The
    // optimizer writes each step's updated tiles back to the store and the coordinator reads
    // each unit's piece from it ahead of the all-gather.
    SLUICE_ASSIGN_OR_RETURN(
        param_store_,
        offload::NvmeParamStore::Create(
            *device_, *tiers_,
            NvmeParamStoreOptionsOf(options_.offload_param, options_.param_dtype, world_rank_),
            NvmeParamGroupsOf(layout_, registry)));
  } else if (host_params) {
    // Stage 3 only (the config refuses it below): the coordinator copies each gathered unit's piece
    // from here into the device all-gather buffer, and the optimizer writes the updates back here.
    SLUICE_ASSIGN_OR_RETURN(host_param_shard_, offload::HostShardBuffer::Allocate(
                                                   shard * param_size, MemoryCategory::kParams,
                                                   "the offloaded parameter shard"));
    param_shard_data_ = host_param_shard_.data();
  } else {
    SLUICE_ASSIGN_OR_RETURN(param_shard_,
                            AllocateZeroed(compute(), shard * param_size, MemoryCategory::kParams,
                                           "the parameter shard"));
    param_shard_data_ = param_shard_.data();
  }
  SLUICE_ASSIGN_OR_RETURN(
      adam_, CreateZeroOptimizer(
                 model_->ops(), compute(), options_,
                 {.shard = param_shard_data_, .host = host_params, .nvme = param_store_.get()},
                 layout_.shard_elements(), *tiers_));
  if (options_.optimizer.type == OptimizerType::kLamb) SLUICE_RETURN_IF_ERROR(SetLambPlan());

  if (stage == 3) {
    SLUICE_ASSIGN_OR_RETURN(
        coordinator_, ParameterCoordinator::Create(
                          CoordinatorOptionsOf(options_), registry, layout_, *queue_, compute(),
                          model_->ops(), binding_, param_shard_data_, param_store_.get()));
  }
  if (stage <= 1) {
    reducer_ = std::make_unique<AllReduceReducer>(
        registry, *queue_, compute(), model_->ops(), full_grads_.data_as<float>(),
        options_.reduce_bucket_size,
        GradientScalingFor(options_.prescale_gradients, options_.gradient_predivide_factor,
                           world.size()));
  } else {
    reducer_ = std::make_unique<ReduceScatterReducer>(registry, layout_, *queue_, compute(),
                                                      binding_, grad_shard_data_, grads_on_host,
                                                      options_.reduce_bucket_size, model_->ops());
  }
  if (stage <= 2) {
    SLUICE_ASSIGN_OR_RETURN(
        publisher_,
        ParameterPublisher::Create({.stage = stage,
                                    .param_dtype = options_.param_dtype,
                                    .allgather_bucket_size = options_.allgather_bucket_size},
                                   layout_, model_->ops(), compute(), *queue_, param_shard_data_,
                                   full_params_.data_as<float>()));
  }
  // One staging buffer serves every collective (they run one at a time on the comm stream), sized
  // for the largest now, so that it is never reallocated between the passes' unit buffers.
  size_t staging = reducer_->LargestStagingBytes();
  if (coordinator_ != nullptr) staging = std::max(staging, coordinator_->LargestStagingBytes());
  if (publisher_ != nullptr) staging = std::max(staging, publisher_->LargestStagingBytes());
  if (staging > 0) {
    SLUICE_RETURN_IF_ERROR(queue_->Staging(staging, "the collectives' staging buffer").status());
  }
  SLUICE_ASSIGN_OR_RETURN(
      guard_, StepGuard::Create({.param_dtype = options_.param_dtype,
                                 .num_threads = options_.num_threads,
                                 .sharded = stage > 0,
                                 .model_parallel = model_parallel_,
                                 .counted = counted_},
                                layout_, grads_on_host, model_->ops(), compute(), *queue_));
  if (!grads_on_host && stage == 1) {
    SLUICE_ASSIGN_OR_RETURN(extract_owned_,
                            DeviceSegments::Create(compute(), ExtractOwnedSegments(layout_),
                                                   "the owned-gradient segments"));
  }
  hooks_ = std::make_unique<Hooks>(*this);
  if (world.rank() == 0) {
    SLUICE_LOG(kInfo, "zero",
               "stage {} over {} ranks: {} parameters, shards of {} elements, optimizer state {} "
               "bytes per rank",
               stage, world.size(), registry.total_elements(), layout_.shard_elements(),
               adam_->state_bytes());
  }
  return OkStatus();
}

Status ZeroEngine::SetLambPlan() {
  LambPlan plan;
  // Each parameter's partition (padding included) is one piece; the partitions tile the shard.
  for (const PartitionInfo& p : layout_.partitions()) {
    plan.segments.push_back({.offset = p.shard_offset, .count = p.partition});
  }
  if (options_.stage > 0 && queue_->comm().size() > 1) {
    CommQueue* queue = queue_.get();
    plan.sum_across_ranks = [queue](std::span<double> sums) {
      if (sums.empty()) return OkStatus();
      return queue->Run("all_gather LAMB norms",
                        [sums](Comm& comm) { return SumInRankOrder(comm, sums); });
    };
  }
  return adam_->SetLambPlan(std::move(plan));
}

Status ZeroEngine::CheckUsable() const {
  if (broken_.ok()) return OkStatus();
  return FailedPreconditionError("the ZeRO engine is unusable since an earlier failure: {}",
                                 broken_.ToString());
}

Status ZeroEngine::Fail(Status status) {
  if (broken_.ok()) broken_ = status;
  // Nothing may still write into the buffers the failed pass left behind.
  (void)queue_->Synchronize();
  (void)compute().Synchronize();
  return status;
}

Status ZeroEngine::InitializeParameters(uint64_t seed) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  const model::ModelOptions& o = model_->options();
  const size_t param_size = DTypeSize(options_.param_dtype);
  std::vector<float> values;
  // With the shard on NVMe each partition (padding included) goes through a scratch buffer into
  // the store's write-back, in shard order. A device shard is built whole in host memory and
  // copied up once (the host never writes device memory); a host shard is written in place.
  const bool device_shard = param_store_ == nullptr && host_param_shard_.empty();
  std::vector<uint8_t> scratch;
  if (device_shard) scratch.assign(static_cast<size_t>(layout_.shard_elements()) * param_size, 0);
  // The values are generated by the compute stream's worker, whose OpenMP team does every other
  // parallel loop of a step: a second team on this thread would make libgomp see more threads
  // than cores and throttle the spinning of both for the rest of the run.
  const auto generate = [&]() -> Status {
    Status status;
    for (const PartitionInfo& p : layout_.partitions()) {
      const ShardSpan owned = layout_.Owned(p);
      values.resize(owned.count);
      const int64_t begin = static_cast<int64_t>(owned.offset);
      model::InitializeRange<float>(model_->registry().parameter(p.param), seed, o.init_std,
                                    o.n_layer, begin, begin + static_cast<int64_t>(owned.count),
                                    values.data());
      uint8_t* dst = nullptr;
      if (param_store_ != nullptr) {
        scratch.assign(static_cast<size_t>(p.partition) * param_size, 0);
        dst = scratch.data();
      } else {
        dst = (device_shard ? scratch.data() : static_cast<uint8_t*>(param_shard_data_)) +
              static_cast<size_t>(p.shard_offset) * param_size;
      }
      offload::ConvertFromF32(values.data(), dst, options_.param_dtype,
                              static_cast<int64_t>(owned.count), options_.num_threads);
      if (param_store_ != nullptr) {
        status = param_store_->WriteBack(p.shard_offset, p.partition, dst);
        if (!status.ok()) break;
      }
    }
    if (param_store_ != nullptr) {
      Status finished = param_store_->FinishWriteBack();
      if (status.ok()) status = std::move(finished);
    }
    return status;
  };
  Status status = device_->LaunchHostFunc(compute(), generate, "generate initial parameters");
  if (status.ok()) status = compute().Synchronize();
  if (status.ok() && device_shard) {
    status = device_->CopyAsync(param_shard_data_, scratch.data(), scratch.size(), CopyKind::kH2D,
                                compute());
    if (status.ok()) status = compute().Synchronize();
  }
  if (status.ok()) status = adam_->LoadMasterFromParams();
  if (status.ok()) status = Publish();
  return status.ok() ? status : Fail(std::move(status));
}

Status ZeroEngine::Publish() {
  if (options_.stage == 3) return coordinator_->GatherPersistent();
  return publisher_->Publish();
}

Status ZeroEngine::Before(const ModuleAccess& access) {
  if (coordinator_ != nullptr) SLUICE_RETURN_IF_ERROR(coordinator_->Fetch(access));
  if (access.phase == Phase::kBackward) {
    SLUICE_RETURN_IF_ERROR(reducer_->BeforeBackward(access.unit));
  }
  if (user_hooks_ != nullptr) {
    SLUICE_RETURN_IF_ERROR(access.phase == Phase::kForward
                               ? user_hooks_->BeforeForward(access.unit)
                               : user_hooks_->BeforeBackward(access.unit));
  }
  if (TraceRecorder::Global().enabled()) {
    // The unit's time on the compute stream, not the host's time enqueueing it.
    return device_->LaunchHostFunc(
        compute(),
        [start = compute_start_ns_] {
          *start = TraceClockNs();
          return OkStatus();
        },
        "trace: unit start");
  }
  return OkStatus();
}

Status ZeroEngine::After(const ModuleAccess& access) {
  if (TraceRecorder::Global().enabled()) {
    SLUICE_RETURN_IF_ERROR(device_->LaunchHostFunc(
        compute(),
        [start = compute_start_ns_, name = DescribeAccess(access, model_->registry())] {
          if (*start > 0) {
            TraceRecorder::Global().Record(kTraceLaneCompute, name, *start, TraceClockNs());
          }
          *start = 0;
          return OkStatus();
        },
        "trace: unit end"));
  }
  if (user_hooks_ != nullptr) {
    SLUICE_RETURN_IF_ERROR(access.phase == Phase::kForward
                               ? user_hooks_->AfterForward(access.unit)
                               : user_hooks_->AfterBackward(access.unit));
  }
  if (coordinator_ != nullptr) SLUICE_RETURN_IF_ERROR(coordinator_->Release(access));
  if (access.phase == Phase::kBackward) {
    std::vector<int> deferred =
        pipelined_ ? model_->DeferredWeightParams(access.unit) : std::vector<int>();
    if (deferred.empty()) {
      SLUICE_RETURN_IF_ERROR(UnitGradsFinal(access.unit));
    } else if (options_.stage >= 2) {
      // A backward-input: what is final now is reduced now; the deferred weights' gradients
      // after the micro-batch's backward-weight. Stages 0-1 reduce the unit after the last one.
      SLUICE_RETURN_IF_ERROR(SumPartialGrads(access.unit, GradHalf::kInput, deferred));
      SLUICE_RETURN_IF_ERROR(reducer_->AfterBackwardInput(access.unit, deferred));
      deferred_params_[static_cast<size_t>(access.unit)] = std::move(deferred);
    }
    // A backward runs the units in reverse: the first unit's ends a micro-batch's.
    if (pipelined_ && access.unit == 0) ++pipelined_backwards_;
  }
  return OkStatus();
}

bool ZeroEngine::SupportsSplitBackward() const {
  return user_hooks_ == nullptr || user_hooks_->SupportsSplitBackward();
}

// No gather: a weight gradient reads the unit's inputs and output gradients, not its weights.
Status ZeroEngine::BeforeWeight(int unit) {
  if (options_.stage >= 2) SLUICE_RETURN_IF_ERROR(reducer_->BeforeBackwardWeight(unit));
  return user_hooks_ != nullptr ? user_hooks_->BeforeBackwardWeight(unit) : OkStatus();
}

Status ZeroEngine::AfterWeight(int unit) {
  if (user_hooks_ != nullptr) SLUICE_RETURN_IF_ERROR(user_hooks_->AfterBackwardWeight(unit));
  if (options_.stage <= 1) return UnitGradsFinal(unit);
  const std::vector<int>& deferred = deferred_params_[static_cast<size_t>(unit)];
  SLUICE_RETURN_IF_ERROR(SumPartialGrads(unit, GradHalf::kWeight, deferred));
  return reducer_->AfterBackwardWeight(unit, deferred);
}

// A pipelined pass counts each unit's micro-batches: a schedule may run a unit's backward for
// the step's last micro-batch before another unit's for an earlier one (ZB-H1's backward-weights
// trail the backward-inputs), but each unit's in micro-batch order.
Status ZeroEngine::UnitGradsFinal(int unit) {
  const bool last_micro_batch =
      pipelined_ ? ++unit_finals_[static_cast<size_t>(unit)] == options_.gradient_accumulation_steps
                 : boundary_;
  // Stages 0-1 reduce the gradients accumulated over the step, in its last micro-batch.
  if (options_.stage <= 1 && !last_micro_batch) return OkStatus();
  SLUICE_RETURN_IF_ERROR(SumPartialGrads(unit));
  return reducer_->AfterBackward(unit);
}

Status ZeroEngine::BeginReduction(bool boundary) {
  boundary_ = boundary;
  return reducer_->BeginPass(boundary);
}

// Before the data-parallel reduction sees a unit's gradients, both kinds, each over its own
// group: the tensor group's (sequence-parallel norms, a single replicated key/value head) and the
// share group's (key/value heads shared by groups of ranks).
Status ZeroEngine::SumPartialGrads(int unit, GradHalf half, std::span<const int> deferred) {
  const auto grad = [this](int p) { return binding_.Grad(p); };
  const auto in_half = [&](const std::vector<int>& params) {
    if (half == GradHalf::kAll) return params;
    std::vector<int> selected;
    for (int p : params) {
      const bool weight = std::find(deferred.begin(), deferred.end(), p) != deferred.end();
      if (weight == (half == GradHalf::kWeight)) selected.push_back(p);
    }
    return selected;
  };
  const auto u = static_cast<size_t>(unit);
  // An empty list means every partial parameter to ReduceSequenceParallelGrads: skipped here.
  if (sp_comm_ != nullptr) {
    const std::vector<int> params = in_half(partial_grads_of_unit_[u]);
    if (!params.empty()) {
      SLUICE_RETURN_IF_ERROR(parallel::ReduceSequenceParallelGrads<float>(
          *sp_comm_, compute(), model_->registry(), grad, params));
    }
  }
  if (share_comm_ != nullptr) {
    const std::vector<int> params = in_half(shared_grads_of_unit_[u]);
    if (!params.empty()) {
      SLUICE_RETURN_IF_ERROR(parallel::ReduceSequenceParallelGrads<float>(
          *share_comm_, compute(), model_->registry(), grad, params,
          parallel::PartialOver::kShareGroup));
    }
  }
  return OkStatus();
}

// The copies of a tied table on the first and last stage: the sum of their gradients, averaged
// over the data-parallel group already (the sums commute), once per step at the end of its last
// pass: earlier, the last stage's compute would wait for the first stage's embedding backward,
// which waits for the gradient the last stage has yet to send. Stages 0-1 sum the full
// gradients before this rank keeps its partitions; stages 2-3 keep no full gradient and sum this
// rank's partition of the step's reduced gradient, the same elements of the table on both ends (a
// parameter is partitioned by its size alone, over the same data-parallel group).
Status ZeroEngine::SumTiedGrads() {
  if (tied_comm_ == nullptr) return OkStatus();
  const model::ParameterInfo& info = model_->registry().parameter(tied_param_);
  const std::string name = "pp.tied " + info.name;
  if (options_.stage <= 1) {
    return tied_comm_->AllReduce<float>(compute(), full_grads_.data_as<float>() + info.offset,
                                        info.numel, name);
  }
  const PartitionInfo& p = layout_.PartitionOf(tied_param_);
  return tied_comm_->AllReduce<float>(compute(), grad_shard_data_ + p.shard_offset, p.partition,
                                      name);
}

Status ZeroEngine::BeforePassEnd() {
  if (pass_kind_ != PassKind::kTrain) return OkStatus();
  SLUICE_RETURN_IF_ERROR(FinishReductions());
  // The pass is enqueued and still computing: the host's wait for the last step's writes and
  // the reads it then begins overlap it.
  if (!pipelined_ && micro_batches_ + 1 == options_.gradient_accumulation_steps) {
    return adam_->PrefetchState(/*wait=*/true);
  }
  return OkStatus();
}

Status ZeroEngine::FinishReductions() {
  SLUICE_RETURN_IF_ERROR(reducer_->EndPass());
  // A pipelined pass ends after all of the step's micro-batches.
  const bool boundary = pipelined_ || micro_batches_ + 1 == options_.gradient_accumulation_steps;
  if (boundary) SLUICE_RETURN_IF_ERROR(SumTiedGrads());
  if (options_.stage == 1 && boundary) {
    // The averaged full gradients are complete: keep this rank's partitions for the step, as
    // device work on the compute stream (Step reads them there, after it).
    const float* full = full_grads_.data_as<float>();
    float* shard = grad_shard_data_;
    if (extract_owned_ != nullptr) {
      const int index = device_->index();
      return model_->ops().CopySegments(
          compute(),
          Tensor(const_cast<float*>(full), DType::kF32, {layout_.total_elements()},
                 MemoryTier::kDevice, index),
          Tensor(shard, DType::kF32, {layout_.shard_elements()}, MemoryTier::kDevice, index),
          extract_owned_->list());
    }
    // The offloaded optimizer's shard is host memory, which the host writes.
    const ShardLayout* layout = &layout_;
    return device_->LaunchHostFunc(
        compute(),
        [layout, full, shard] {
          ExtractOwned(*layout, full, shard);
          return OkStatus();
        },
        "ExtractOwned gradient partitions");
  }
  return OkStatus();
}

Status ZeroEngine::BeginPipelinedPass(PassKind kind) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  const bool train = kind == PassKind::kTrain;
  if (pipelined_ || (train && micro_batches_ != 0)) {
    return FailedPreconditionError(
        "BeginPipelinedPass after {} micro-batches of ForwardBackward{}: a pipelined training "
        "pass is a whole step's micro-batches, call Step() first",
        micro_batches_, pipelined_ ? " and an open pipelined pass" : "");
  }
  if (train) {
    if (Status status = ZeroGradients(); !status.ok()) return Fail(status);
  }
  pass_kind_ = kind;
  pipelined_ = true;
  pipelined_backwards_ = 0;
  unit_finals_.assign(model_->registry().units().size(), 0);
  deferred_params_.assign(model_->registry().units().size(), {});
  // One reduction pass for the step's micro-batches: the units' gradients are reduced as each
  // unit's become final (UnitGradsFinal), which may interleave across micro-batches.
  if (train) {
    if (Status status = BeginReduction(/*boundary=*/true); !status.ok()) {
      return AbortPipelinedPass(status);
    }
  }
  if (coordinator_ != nullptr) {
    if (Status status = coordinator_->BeginPass(kind); !status.ok()) {
      return AbortPipelinedPass(status);
    }
  }
  model_->SetParameterBinding(&binding_);
  model_->SetHooks(hooks_.get());
  return OkStatus();
}

Status ZeroEngine::EndPipelinedPass() {
  if (!pipelined_) {
    return FailedPreconditionError("EndPipelinedPass without BeginPipelinedPass");
  }
  pipelined_ = false;
  model_->SetHooks(nullptr);
  model_->SetParameterBinding(nullptr);
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  if (coordinator_ != nullptr) {
    if (Status status = coordinator_->EndPass(); !status.ok()) return Fail(status);
  }
  if (pass_kind_ == PassKind::kTrain &&
      pipelined_backwards_ != options_.gradient_accumulation_steps) {
    return Fail(FailedPreconditionError(
        "a pipelined pass back-propagated {} micro-batches, gradient_accumulation_steps is {}: "
        "the schedule's micro-batches must be the step's",
        pipelined_backwards_, options_.gradient_accumulation_steps));
  }
  if (pass_kind_ == PassKind::kTrain) micro_batches_ = options_.gradient_accumulation_steps;
  return OkStatus();
}

Status ZeroEngine::AbortPipelinedPass(Status error) {
  pipelined_ = false;
  model_->SetHooks(nullptr);
  model_->SetParameterBinding(nullptr);
  return Fail(std::move(error));
}

Result<double> ZeroEngine::RunPass(PassKind kind, const int32_t* inputs, const int32_t* targets,
                                   int64_t batch, int64_t seq, double loss_grad) {
  if (pipelined_) return FailedPreconditionError("a pass inside an open pipelined pass");
  const bool train = kind == PassKind::kTrain;
  pass_kind_ = kind;
  if (train) {
    const bool boundary = micro_batches_ + 1 == options_.gradient_accumulation_steps;
    if (Status status = BeginReduction(boundary); !status.ok()) return Fail(status);
    // The optimizer state on NVMe starts loading for the step while the passes compute: here
    // where the last step's writes are done, at the boundary pass's end (BeforePassEnd) anyway.
    if (Status status = adam_->PrefetchState(/*wait=*/false); !status.ok()) return Fail(status);
  }
  if (coordinator_ != nullptr) {
    if (Status status = coordinator_->BeginPass(kind); !status.ok()) return Fail(status);
  }
  model_->SetParameterBinding(&binding_);
  model_->SetHooks(hooks_.get());
  // The model enqueues the whole pass (the hooks enqueue the gathers and reductions beside it,
  // BeforePassEnd the last reductions) and synchronizes once, reading the loss back.
  Result<double> loss = train ? model_->ForwardBackward(inputs, targets, batch, seq, loss_grad)
                              : model_->ForwardLoss(inputs, targets, batch, seq);
  model_->SetHooks(nullptr);
  model_->SetParameterBinding(nullptr);
  if (!loss.ok()) return Fail(loss.status());
  if (coordinator_ != nullptr) {
    if (Status status = coordinator_->EndPass(); !status.ok()) return Fail(status);
  }
  return loss;
}

Result<double> ZeroEngine::ForwardBackward(const int32_t* inputs, const int32_t* targets,
                                           int64_t batch, int64_t seq, double loss_grad) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  if (micro_batches_ == options_.gradient_accumulation_steps) {
    return FailedPreconditionError(
        "ForwardBackward after {} micro-batches: gradient_accumulation_steps = {}, call Step() "
        "first",
        micro_batches_, options_.gradient_accumulation_steps);
  }
  if (micro_batches_ == 0) {
    if (Status status = ZeroGradients(); !status.ok()) return Fail(status);
  }
  SLUICE_ASSIGN_OR_RETURN(double loss,
                          RunPass(PassKind::kTrain, inputs, targets, batch, seq, loss_grad));
  ++micro_batches_;
  return loss;
}

Status ZeroEngine::ZeroGradients() {
  // Device accumulators on the compute stream, before the pass that adds into them; the host
  // shard (offloaded optimizer) in place.
  if (!full_grads_.empty()) {
    SLUICE_RETURN_IF_ERROR(
        device_->MemsetAsync(full_grads_.data(), 0, full_grads_.size(), compute()));
  }
  if (!grad_shard_.empty()) {
    SLUICE_RETURN_IF_ERROR(
        device_->MemsetAsync(grad_shard_.data(), 0, grad_shard_.size(), compute()));
  }
  if (!host_grad_shard_.empty()) host_grad_shard_.Zero(options_.num_threads);
  return OkStatus();
}

Result<double> ZeroEngine::ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                       int64_t seq) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  return RunPass(PassKind::kEval, inputs, targets, batch, seq, 0.0);
}

float* ZeroEngine::step_gradient_data() const {
  return options_.stage == 0 ? full_grads_.data_as<float>() : grad_shard_data_;
}

Result<std::vector<float>> ZeroEngine::ReadStepGradients() {
  std::vector<float> out(static_cast<size_t>(layout_.shard_elements()));
  const CopyKind kind = host_grad_shard_.empty() ? CopyKind::kD2H : CopyKind::kH2H;
  SLUICE_RETURN_IF_ERROR(device_->CopyAsync(out.data(), step_gradient_data(),
                                            out.size() * sizeof(float), kind, compute()));
  SLUICE_RETURN_IF_ERROR(compute().Synchronize());
  return out;
}

Result<ZeroStepResult> ZeroEngine::Step(const ZeroStepInput& input) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  if (micro_batches_ != options_.gradient_accumulation_steps) {
    return FailedPreconditionError(
        "Step() after {} micro-batches: gradient_accumulation_steps = {} ForwardBackward calls "
        "come first",
        micro_batches_, options_.gradient_accumulation_steps);
  }
  micro_batches_ = 0;
  float* grads = step_gradient_data();
  Result<ZeroStepResult> result = guard_->Check(grads, input);
  if (!result.ok()) return Fail(result.status());
  if (result->overflow) return result;
  if (Status status = adam_->Step(grads, input.lr, result->clip_coefficient / input.loss_scale);
      !status.ok()) {
    return Fail(status);
  }
  if (Status status = Publish(); !status.ok()) return Fail(status);
  return result;
}

Result<double> ZeroEngine::MeanAcrossRanks(double value) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  double sum = 0.0;
  Status status = queue_->Run("all_gather mean", [&sum, value](Comm& comm) {
    SLUICE_ASSIGN_OR_RETURN(sum, SumInRankOrder(comm, value));
    return OkStatus();
  });
  if (!status.ok()) return Fail(status);
  return sum / static_cast<double>(queue_->comm().size());
}

Status ZeroEngine::GatherFullParameters(std::span<float> out) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  if (static_cast<int64_t>(out.size()) != layout_.total_elements()) {
    return InvalidArgumentError("GatherFullParameters: {} floats given for {} parameters",
                                out.size(), layout_.total_elements());
  }
  if (options_.stage <= 2) {
    Status copied = device_->CopyAsync(out.data(), full_params_.data(), out.size() * sizeof(float),
                                       CopyKind::kD2H, compute());
    if (copied.ok()) copied = compute().Synchronize();
    return copied.ok() ? copied : Fail(std::move(copied));
  }
  // The shard as the last optimizer step left it (its update may still be on the compute
  // stream): consolidation is outside the training step, so the host may wait here.
  if (Status done = compute().Synchronize(); !done.ok()) return Fail(std::move(done));
  const ShardLayout* layout = &layout_;
  const DType dtype = options_.param_dtype;
  const size_t element_size = DTypeSize(dtype);
  const size_t total =
      static_cast<size_t>(layout_.shard_elements()) * static_cast<size_t>(layout_.world());
  // Host memory: consolidation is for the caller's host-side copy, not the device budget.
  auto staging = std::make_unique<uint8_t[]>(total * element_size);
  std::vector<int> run(layout_.partitions().size());
  for (size_t i = 0; i < run.size(); ++i) run[i] = static_cast<int>(i);
  const void* shard = param_shard_data_;
  std::unique_ptr<uint8_t[]> from_nvme;
  if (param_store_ != nullptr) {
    from_nvme =
        std::make_unique<uint8_t[]>(static_cast<size_t>(layout_.shard_elements()) * element_size);
    Status read = param_store_->ReadRange(0, layout_.shard_elements(), from_nvme.get());
    if (!read.ok()) return Fail(std::move(read));
    shard = from_nvme.get();
  }
  float* full = out.data();
  Status status = queue_->Run("all_gather full parameters", [&](Comm& comm) -> Status {
    Status gathered = comm.AllGather(shard, staging.get(), total, dtype);
    if (!gathered.ok()) {
      // A timed-out collective stays posted and may still write into its buffer
      // (runtime/comm.h): it must outlive it, so it is leaked on purpose.
      (void)staging.release();
      return gathered;
    }
    UnpackGathered(*layout, run, staging.get(), dtype,
                   [full](const PartitionInfo& p) { return full + p.full_offset; });
    return OkStatus();
  });
  return status.ok() ? status : Fail(std::move(status));
}

ZeroMemory ZeroEngine::memory() const {
  ZeroMemory m;
  m.param_shard = param_shard_.size();
  m.full_params = full_params_.size();
  m.full_grads = full_grads_.size();
  m.grad_shard = grad_shard_.size();
  m.optimizer_state = adam_->state_bytes();
  m.host_param_shard = host_param_shard_.size();
  if (param_store_ != nullptr) {
    m.param_nvme = param_store_->nvme_bytes();
    m.param_pinned = param_store_->pinned_bytes();
    m.param_cache = param_store_->cache_bytes();
  }
  m.host_grad_shard = host_grad_shard_.size();
  m.optimizer_host = adam_->host_bytes();
  m.optimizer_pinned = adam_->pinned_bytes();
  m.optimizer_nvme = adam_->nvme_bytes();
  return m;
}

// ---- Checkpoint state ---------------------------------------------------------------------

std::vector<ZeroStateRange> ZeroEngine::SavedStateRanges() const {
  // In stage 0 every rank holds everything, and rank 0 alone saves it.
  if (options_.stage == 0 && queue_->comm().rank() != 0) return {};
  std::vector<ZeroStateRange> ranges = OwnedStateRanges(layout_);
  if (!counted_.empty()) {
    std::erase_if(ranges, [this](const ZeroStateRange& r) {
      return !counted_[static_cast<size_t>(r.param)];
    });
  }
  return ranges;
}

Status ZeroEngine::ImportState(const ZeroStateReaders& readers) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  SLUICE_RETURN_IF_ERROR(CheckStateReaders(readers, options_.optimizer.type));
  return adam_->RestoreState(StateSourceOf(layout_, model_->registry(), readers),
                             readers.optimizer_step);
}

Status ZeroEngine::PublishParameters() {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  Status status = Publish();
  return status.ok() ? status : Fail(std::move(status));
}

}  // namespace sluice::zero
