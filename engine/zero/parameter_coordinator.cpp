#include "engine/zero/parameter_coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <string>

#include "engine/zero/device_segments.h"
#include "engine/zero/offload_options.h"
#include "engine/zero/rank_agreement.h"
#include "engine/zero/zero_placement.h"
#include "engine/zero/zeroed_buffer.h"
#include "runtime/check.h"
#include "runtime/logging.h"

namespace sluice::zero {
namespace {

// A tag travels as the raw bits of one element (collectives copy bits, never interpret them):
// the low DTypeSize bytes of its word.
static_assert(std::endian::native == std::endian::little, "tag words are little-endian");

// An NVMe read for one gather: issued with the gather, awaited on the comm stream. The slot is
// freed once the piece is copied out, or when the last holder lets go (a gather dropped unrun).
struct PendingRead {
  PendingRead(offload::NvmeParamStore* nvme, int group)
      : store(nvme), read(nvme->BeginRead(group)) {}
  ~PendingRead() { store->EndRead(read); }
  PendingRead(const PendingRead&) = delete;
  PendingRead& operator=(const PendingRead&) = delete;

  offload::NvmeParamStore* store;
  offload::NvmeParamRead read;
  Status status;  // of the read, set on the comm stream before the tags are sent
};

}  // namespace

CoordinatorOptions CoordinatorOptionsOf(const ZeroOptions& options) {
  return {.budgets = {.prefetch_bucket_size = options.stage3_prefetch_bucket_size,
                      .max_live_parameters = options.stage3_max_live_parameters,
                      .max_reuse_distance = options.stage3_max_reuse_distance},
          .param_dtype = options.param_dtype,
          .host_shard = PlaceZeroState(options).param_shard == StateTier::kHost};
}

ParameterCoordinator::ParameterCoordinator(const CoordinatorOptions& options,
                                           const model::ParameterRegistry& registry,
                                           const ShardLayout& layout, CommQueue& queue,
                                           Stream& compute, ops::OpsBackend& ops,
                                           ZeroBinding& binding, const void* param_shard)
    : options_(options),
      registry_(&registry),
      layout_(&layout),
      queue_(&queue),
      compute_(&compute),
      ops_(&ops),
      binding_(&binding),
      param_shard_(param_shard),
      dense_offset_(registry.parameters().size(), 0) {}

Result<std::unique_ptr<ParameterCoordinator>> ParameterCoordinator::Create(
    const CoordinatorOptions& options, const model::ParameterRegistry& registry,
    const ShardLayout& layout, CommQueue& queue, Stream& compute, ops::OpsBackend& ops,
    ZeroBinding& binding, const void* param_shard, offload::NvmeParamStore* nvme) {
  std::unique_ptr<ParameterCoordinator> c(new ParameterCoordinator(
      options, registry, layout, queue, compute, ops, binding, param_shard));
  c->nvme_ = nvme;
  const size_t num_units = registry.units().size();
  SLUICE_CHECK_LT(num_units, static_cast<size_t>(kFailedReadTag)) << "too many units to tag";
  std::vector<int> group_of_unit(num_units, -1);
  for (size_t u = 0; u < num_units; ++u) {
    const UnitShards& shards = layout.units()[u];
    if (shards.gathered_numel == 0) continue;
    group_of_unit[u] = static_cast<int>(c->groups_.size());
    Group group;
    group.unit = static_cast<int>(u);
    group.numel = shards.gathered_numel;
    c->groups_.push_back(std::move(group));
    int64_t offset = 0;
    for (int index : shards.gathered) {
      const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
      c->dense_offset_[static_cast<size_t>(p.param)] = offset;
      offset += p.numel;
    }
  }
  const std::vector<std::vector<int>> reads = StorageUnitsReadBy(registry);
  std::vector<std::vector<int>> needs(num_units);
  for (size_t u = 0; u < num_units; ++u) {
    for (int owner : reads[u]) {
      if (group_of_unit[static_cast<size_t>(owner)] >= 0) {
        needs[u].push_back(group_of_unit[static_cast<size_t>(owner)]);
      }
    }
  }
  std::vector<Stage3Group> planned;
  for (const Group& g : c->groups_) planned.push_back({g.unit, g.numel});
  c->planner_ = std::make_unique<Stage3Planner>(std::move(planned), std::move(needs),
                                                layout.persistent_numel(), options.budgets);

  if (nvme != nullptr) {
    // Group g of the coordinator is group g of the store; the persistent run comes last.
    const std::vector<offload::NvmeParamGroup> expected = NvmeParamGroupsOf(layout, registry);
    bool same = expected.size() == nvme->groups().size();
    for (size_t g = 0; same && g < expected.size(); ++g) {
      same = expected[g].shard_offset == nvme->groups()[g].shard_offset &&
             expected[g].elements == nvme->groups()[g].elements;
    }
    if (!same) {
      return InvalidArgumentError(
          "the NVMe parameter store holds {} groups that are not this layout's {} (unit gather "
          "runs, then the persistent run): create it with NvmeParamGroupsOf",
          nvme->groups().size(), expected.size());
    }
  }

  const int64_t persistent = layout.persistent_numel();
  if (const int u = c->planner_->UnitOverBudget(); u >= 0) {
    const int64_t need = c->UnitNeed(u);
    return InvalidArgumentError(
        "zero_optimization.stage3_max_live_parameters = {} is too small: {} needs {} parameter "
        "elements gathered at once plus the {} of the persistent parameters (those of at most "
        "stage3_param_persistence_threshold elements stay gathered); raise it to at least {} "
        "or lower the persistence threshold",
        options.budgets.max_live_parameters, registry.units()[static_cast<size_t>(u)].name, need,
        persistent, persistent + need);
  }

  if (persistent > 0) {
    Result<DeviceBuffer> buffer = queue.device().Allocate(
        static_cast<size_t>(persistent) * sizeof(float), MemoryCategory::kParams);
    if (!buffer.ok()) {
      return Status(buffer.status()).WithContext("allocating the persistent parameters");
    }
    c->persistent_ = std::move(buffer).value();
    // Zero until GatherPersistent, as device work on the comm stream.
    SLUICE_RETURN_IF_ERROR(
        ZeroOnStream(queue.stream(), c->persistent_, "the persistent parameters"));
    int64_t offset = 0;
    for (int index : layout.persistent()) {
      const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
      c->dense_offset_[static_cast<size_t>(p.param)] = offset;
      binding.SetValue(p.param, c->persistent_.data_as<float>() + offset);
      offset += p.numel;
    }
  }
  // Run g < groups_.size() is group g, the last the persistent parameters; each sends its tag,
  // and the NVMe path's word (whose tag is known once its read completes) comes after them.
  std::vector<std::vector<ops::CopySegment>> unpack;
  for (const Group& g : c->groups_) {
    unpack.push_back(UnpackGatheredSegments(layout,
                                            layout.units()[static_cast<size_t>(g.unit)].gathered,
                                            /*header=*/1, c->dense_offset_));
  }
  unpack.push_back(UnpackGatheredSegments(layout, layout.persistent(), 1, c->dense_offset_));
  const int runs = static_cast<int>(unpack.size());
  SLUICE_ASSIGN_OR_RETURN(c->plan_,
                          GatherPlan::Create(queue.stream(), unpack, runs + 1, layout.world()));
  for (int run = 0; run + 1 < runs; ++run) {
    *c->plan_->send_word(run) =
        static_cast<uint32_t>(c->groups_[static_cast<size_t>(run)].unit) + 1;
  }
  *c->plan_->send_word(runs - 1) = kPersistentTag;
  c->stats_.live = persistent;
  c->stats_.peak_live = persistent;
  return c;
}

ParameterCoordinator::~ParameterCoordinator() { (void)queue_->Synchronize(); }

const ModuleTrace* ParameterCoordinator::trace(PassKind kind) const {
  const auto& trace = traces_[static_cast<int>(kind)];
  return trace.has_value() ? &*trace : nullptr;
}

size_t ParameterCoordinator::LargestStagingBytes() const {
  int64_t piece = layout_->persistent().empty() ? 0 : layout_->persistent_elements() + 1;
  for (const UnitShards& unit : layout_->units()) {
    if (!unit.gathered.empty()) piece = std::max(piece, unit.gather_elements + 1);
  }
  return static_cast<size_t>(piece) * static_cast<size_t>(layout_->world()) *
         DTypeSize(options_.param_dtype);
}

Status ParameterCoordinator::GatherPersistent() {
  SLUICE_CHECK(!in_pass_) << "persistent parameters are gathered between passes";
  if (layout_->persistent().empty()) return OkStatus();
  // After the optimizer's update of the shard and the last pass's reads of the buffer.
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(*compute_));
  SLUICE_ASSIGN_OR_RETURN(
      CommTicket ticket, EnqueueGather(kPersistentTag, static_cast<int>(groups_.size()),
                                       layout_->persistent_offset(), layout_->persistent_elements(),
                                       persistent_.data_as<float>(), layout_->persistent_numel()));
  return queue_->Join(*compute_, ticket);
}

std::string ParameterCoordinator::TagName(uint32_t tag) const {
  if (tag == kPersistentTag) return "the persistent parameters";
  if (tag == kFailedReadTag) return "nothing (its NVMe parameter read failed)";
  if (tag >= 1 && tag <= registry_->units().size()) return registry_->units()[tag - 1].name;
  return fmt::format("unknown parameters (tag {})", tag);
}

Result<CommTicket> ParameterCoordinator::EnqueueGather(uint32_t tag, int run, int64_t shard_offset,
                                                       int64_t elements, float* dense,
                                                       int64_t dense_numel) {
  const DType dtype = options_.param_dtype;
  const size_t size = DTypeSize(dtype);
  const int world = layout_->world();
  const int rank = layout_->rank();
  const size_t piece = static_cast<size_t>(elements) + 1;  // a tag, then the partitions
  const size_t total = piece * static_cast<size_t>(world);
  Device& device = queue_->device();
  Stream& stream = queue_->stream();
  const std::string name =
      fmt::format("all_gather {}", tag == kPersistentTag ? "persistent parameters" : TagName(tag));
  SLUICE_ASSIGN_OR_RETURN(
      void* staging,
      queue_->Staging(total * size, fmt::format("the all-gather buffer of {}", TagName(tag))));
  auto* gathered = static_cast<uint8_t*>(staging);
  uint8_t* mine = gathered + static_cast<size_t>(rank) * piece * size;

  // This rank's piece: its tag word, then its partitions (a contiguous range of the shard).
  const uint32_t* tag_word = plan_->send_word(run);
  const void* values =
      static_cast<const uint8_t*>(param_shard_) + static_cast<size_t>(shard_offset) * size;
  CopyKind kind = options_.host_shard ? CopyKind::kH2D : CopyKind::kD2D;
  std::shared_ptr<PendingRead> pending;
  if (nvme_ != nullptr) {
    // The read starts now (when the gather is issued or prefetched); the comm stream waits for
    // it before the copy. A failed read still takes part in the collective, tagged as failed, so
    // that the other ranks fail at once (naming this rank) instead of waiting for
    // run.comm_timeout.
    pending = std::make_shared<PendingRead>(nvme_, run);
    uint32_t* word = plan_->send_word(static_cast<int>(groups_.size()) + 1);
    SLUICE_RETURN_IF_ERROR(device.LaunchHostFunc(
        stream,
        [pending, word, tag]() -> Status {
          Result<const void*> read = pending->store->AwaitRead(pending->read);
          SLUICE_CHECK(!read.ok() || *read == pending->read.data) << "the read moved";
          pending->status = read.status();
          *word = read.ok() ? tag : kFailedReadTag;
          return OkStatus();
        },
        fmt::format("await the NVMe read of {}", name)));
    tag_word = word;
    values = pending->read.data;  // the slot or the cache; null when the read failed at issue
    kind = CopyKind::kH2D;
  }
  SLUICE_RETURN_IF_ERROR(device.CopyAsync(mine, tag_word, size, CopyKind::kH2D, stream));
  if (values != nullptr && elements > 0) {
    SLUICE_RETURN_IF_ERROR(
        device.CopyAsync(mine + size, values, static_cast<size_t>(elements) * size, kind, stream));
  }
  if (pending != nullptr) {
    // Copied out: the slot may take the next read while the all-gather runs.
    SLUICE_RETURN_IF_ERROR(device.LaunchHostFunc(
        stream,
        [pending]() {
          pending->store->EndRead(pending->read);
          return OkStatus();
        },
        fmt::format("free the NVMe read slot of {}", name)));
  }

  // After the all-gather, in the same ticket: the tag check, then the unpacking.
  const auto then = [&](Stream& s) -> Status {
    uint32_t* received = plan_->received();
    SLUICE_RETURN_IF_ERROR(device.Copy2DAsync(received, sizeof(uint32_t), gathered, piece * size,
                                              size, static_cast<size_t>(world), CopyKind::kD2H, s));
    SLUICE_RETURN_IF_ERROR(device.LaunchHostFunc(
        s,
        [this, received, pending, tag, rank, world]() -> Status {
          if (pending != nullptr) SLUICE_RETURN_IF_ERROR(pending->status);
          for (int r = 0; r < world; ++r) {
            if (received[r] != tag) {
              return FailedPreconditionError(
                  "the ranks gathered different parameters at the same point: rank {} gathered "
                  "{}, rank {} gathered {}; every rank must run the same modules in the same "
                  "order",
                  rank, TagName(tag), r, TagName(received[r]));
            }
          }
          return OkStatus();
        },
        fmt::format("check the tags of {}", name)));
    const int index = device.index();
    return ops_->CopySegments(
        s, Tensor(gathered, dtype, {static_cast<int64_t>(total)}, MemoryTier::kDevice, index),
        Tensor(dense, DType::kF32, {dense_numel}, MemoryTier::kDevice, index), plan_->unpack(run));
  };
  return queue_->Enqueue(
      name, total * size,
      [mine, gathered, total, dtype](Comm& comm) {
        return comm.AllGather(mine, gathered, total, dtype);
      },
      then);
}

Status ParameterCoordinator::Issue(int group) {
  Group& g = groups_[static_cast<size_t>(group)];
  SLUICE_CHECK(g.state == State::kReleased);
  SLUICE_CHECK_LE(stats_.live + g.numel, options_.budgets.max_live_parameters) << "budget overrun";
  const model::UnitInfo& unit = registry_->units()[static_cast<size_t>(g.unit)];
  const UnitShards& shards = layout_->units()[static_cast<size_t>(g.unit)];
  // In the compute stream's order: it may reuse the buffer of a group released on it, so the
  // gather into it starts once the compute stream is past that group's kernels.
  Result<DeviceBuffer> buffer = queue_->device().AllocateAsync(
      static_cast<size_t>(g.numel) * sizeof(float), MemoryCategory::kParams, *compute_);
  if (!buffer.ok()) {
    return Status(buffer.status())
        .WithContext(fmt::format("allocating the gathered parameters of {}", unit.name));
  }
  g.buffer = std::move(buffer).value();
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(*compute_));
  float* dense = g.buffer.data_as<float>();
  SLUICE_ASSIGN_OR_RETURN(
      g.ticket, EnqueueGather(static_cast<uint32_t>(g.unit) + 1, group, shards.gather_offset,
                              shards.gather_elements, dense, g.numel));
  for (int index : shards.gathered) {
    const PartitionInfo& p = layout_->partitions()[static_cast<size_t>(index)];
    binding_->SetValue(p.param, dense + dense_offset_[static_cast<size_t>(p.param)]);
  }
  g.state = State::kInflight;
  stats_.live += g.numel;
  stats_.peak_live = std::max(stats_.peak_live, stats_.live);
  ++stats_.gathers;
  stats_.gathered_elements += g.numel;
  return OkStatus();
}

Status ParameterCoordinator::WaitFor(int group) {
  Group& g = groups_[static_cast<size_t>(group)];
  if (g.state != State::kInflight) return OkStatus();
  SLUICE_RETURN_IF_ERROR(queue_->Join(*compute_, g.ticket));
  g.state = State::kAvailable;
  return OkStatus();
}

Status ParameterCoordinator::ReleaseGroup(int group) {
  Group& g = groups_[static_cast<size_t>(group)];
  if (g.state == State::kReleased) return OkStatus();
  SLUICE_RETURN_IF_ERROR(WaitFor(group));  // the gather may still write into the buffer
  for (int index : layout_->units()[static_cast<size_t>(g.unit)].gathered) {
    binding_->SetValue(layout_->partitions()[static_cast<size_t>(index)].param, nullptr);
  }
  g.buffer.FreeAsync(*compute_);
  g.state = State::kReleased;
  stats_.live -= g.numel;
  return OkStatus();
}

Status ParameterCoordinator::Carry(const Stage3Step& step) {
  stats_.reused += step.reused;
  for (const Stage3Action& action : step.actions) {
    switch (action.kind) {
      case Stage3ActionKind::kGather:
        SLUICE_RETURN_IF_ERROR(Issue(action.group));
        break;
      case Stage3ActionKind::kPrefetch:
        SLUICE_RETURN_IF_ERROR(Issue(action.group));
        ++stats_.prefetches;
        break;
      case Stage3ActionKind::kEvict:
        SLUICE_RETURN_IF_ERROR(ReleaseGroup(action.group));
        ++stats_.evictions;
        break;
      case Stage3ActionKind::kRelease:
        SLUICE_RETURN_IF_ERROR(ReleaseGroup(action.group));
        break;
    }
    if (action_observer_) action_observer_(action);
  }
  return OkStatus();
}

void ParameterCoordinator::LeaveTrace(const ModuleAccess& access) {
  ++stats_.divergences;
  if (divergence_logged_) return;
  divergence_logged_ = true;
  const ModuleTrace& trace = *traces_[static_cast<int>(kind_)];
  const size_t position = planner_->position();
  SLUICE_LOG(kWarn, "zero",
             "a {} pass left its recorded module trace at access {}: expected {}, got {}; "
             "fetching parameters on demand for the rest of the pass (said once; later "
             "divergences are only counted)",
             PassKindName(kind_), position + 1,
             position < trace.size() ? DescribeAccess(trace[position], *registry_)
                                     : std::string("the end of the pass"),
             DescribeAccess(access, *registry_));
}

Status ParameterCoordinator::BeginPass(PassKind kind) {
  SLUICE_CHECK(!in_pass_) << "BeginPass without EndPass";
  in_pass_ = true;
  kind_ = kind;
  const std::optional<ModuleTrace>& trace = traces_[static_cast<int>(kind)];
  recording_pass_ = !trace.has_value();
  if (recording_pass_) recording_ = ModuleTrace();
  return Carry(planner_->BeginPass(recording_pass_ ? nullptr : &*trace));
}

Status ParameterCoordinator::Fetch(const ModuleAccess& access) {
  SLUICE_CHECK(in_pass_) << "Fetch outside a pass";
  SLUICE_CHECK(access.unit >= 0 && access.unit < static_cast<int>(registry_->units().size()));
  if (recording_pass_) recording_.Append(access);
  const Stage3Step step = planner_->Fetch(access);
  if (step.left_trace) LeaveTrace(access);
  SLUICE_RETURN_IF_ERROR(Carry(step));
  for (int group : planner_->needs(access.unit)) SLUICE_RETURN_IF_ERROR(WaitFor(group));
  if (observer_) observer_(access, stats_);
  return OkStatus();
}

Status ParameterCoordinator::Release(const ModuleAccess& access) {
  SLUICE_CHECK(in_pass_) << "Release outside a pass";
  return Carry(planner_->Release(access));
}

Status ParameterCoordinator::CheckTraceAcrossRanks(const ModuleTrace& trace) {
  const std::array<AgreedValue, 2> values = {
      AgreedValue{
          fmt::format("the number of unit accesses of the first {} pass", PassKindName(kind_)),
          static_cast<int64_t>(trace.size())},
      AgreedValue{
          fmt::format("the module order (trace hash) of the first {} pass", PassKindName(kind_)),
          static_cast<int64_t>(trace.Hash())},
  };
  return queue_->Run("check module trace", [&values](Comm& comm) {
    return CheckSameOnAllRanks(comm, values, "the stage-3 module trace");
  });
}

Status ParameterCoordinator::EndPass() {
  SLUICE_CHECK(in_pass_) << "EndPass without BeginPass";
  in_pass_ = false;
  // The planner's releases, then (after a failed action only) whatever it no longer counts.
  Status status;
  for (const Stage3Action& action : planner_->EndPass().actions) {
    Status released = ReleaseGroup(action.group);
    if (action_observer_) action_observer_(action);
    if (status.ok()) status = std::move(released);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    Status released = ReleaseGroup(static_cast<int>(g));
    if (status.ok()) status = std::move(released);
  }
  SLUICE_RETURN_IF_ERROR(status);
  if (recording_pass_) {
    SLUICE_RETURN_IF_ERROR(CheckTraceAcrossRanks(recording_));
    traces_[static_cast<int>(kind_)] = std::move(recording_);
    recording_ = ModuleTrace();
  }
  return OkStatus();
}

}  // namespace sluice::zero
