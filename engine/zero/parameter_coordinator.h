// Stage 3: which units' parameters are gathered when. The engine calls Fetch before a unit's
// forward or backward and Release after it; the coordinator all-gathers the unit's
// non-persistent partitions (one collective, on the comm stream) into a full fp32 buffer, binds it
// for the model, and frees it again.
//
// Streams. Fetch and Release only enqueue; the host never waits for a gather. A gather buffer is
// allocated in the compute stream's order (AllocateAsync), the comm stream starts the gather
// once the compute stream has reached that point (so reused memory is no longer read), and the
// compute stream waits for the gather before the unit's kernels (CommQueue::Join). A release
// frees the buffer in the compute stream's order, after the unit's kernels: the next allocation
// reuses it at once, so the device memory held never exceeds what the budget below allows, however
// far the host runs ahead of the streams.
//
// Groups. A unit's non-persistent parameters form one gather group; a unit needs its own group
// and those of the units whose storage it reads (the embeddings for a tied LM head). Parameters
// of at most stage3_param_persistence_threshold elements are persistent: gathered once after
// every optimizer step into one buffer and never released.
//
// Policy. Which groups are gathered, prefetched, kept and evicted when is decided by one
// Stage3Planner (stage3_planner.h, where the rules are written down: prefetch by the trace within
// stage3_prefetch_bucket_size, reuse within stage3_max_reuse_distance, the hard
// stage3_max_live_parameters budget with farthest-next-use eviction); the memory estimator
// replays the same planner. The coordinator carries its actions out in order and counts them.
// Create() fails when one access alone cannot fit the budget.
//
// Trace. The first pass of each kind (training, evaluation) records the order of the accesses,
// fetching on demand; at its end the trace is compared across ranks (a rank that ran different
// modules is an error). Later passes replay it through the planner. An access that is not the
// trace's next one leaves the trace: the rest of the pass fetches on demand and releases after
// use. The first time, a warning says so; later ones are counted. Every pass ends with nothing
// gathered but the persistent parameters (the optimizer step that may follow changes the
// shards).
//
// A gather is stream work on the comm stream; the host never touches the device memory it moves
// (gather_plan.h holds what it needs, made once): this rank's piece, a tag word and its
// partitions, is copied into the staging buffer (device to device from a device shard, host to
// device from an offloaded one or from NVMe), the Comm's all-gather runs on it (a host function
// of the comm stream for MPI, enqueued on the stream for NCCL), every rank's tag word comes back
// to pinned host memory by a device-to-host copy for a host function to check, and one ops
// CopySegments unpacks the partitions into the dense fp32 buffer, widening the parameter dtype.
//
// NVMe (a NvmeParamStore given to Create): this rank's piece of every gather is read from the
// store instead of the shard. The read is issued when the gather is issued (on demand or by the
// prefetch), into one of the store's pinned slots, and a host function on the comm stream waits
// for it (verifying its checksum; host memory only) before the piece's copy, which a second one
// follows to free the slot: prefetching by the trace reads ahead.
//
// Unlike DeepSpeed, where max_live_parameters only throttles prefetching (a soft limit), the
// budget here is hard: the live count never exceeds it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/parameter_registry.h"
#include "engine/zero/comm_queue.h"
#include "engine/zero/gather_plan.h"
#include "engine/zero/module_trace.h"
#include "engine/zero/shard_layout.h"
#include "engine/zero/stage3_planner.h"
#include "engine/zero/zero_binding.h"
#include "engine/zero/zero_options.h"
#include "offload/nvme_param_store.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

struct CoordinatorOptions {
  Stage3Budgets budgets;  // zero_optimization.stage3_* (stage3_planner.h)
  DType param_dtype{};    // of the shard and the all-gathers
  // The shard is host memory (offload_param.device cpu), not device memory.
  bool host_shard = false;
};
// The coordinator's part of the engine's options.
CoordinatorOptions CoordinatorOptionsOf(const ZeroOptions& options);

struct CoordinatorStats {
  int64_t live = 0;         // parameter elements gathered or being gathered, persistent included
  int64_t peak_live = 0;    // since creation
  int64_t gathers = 0;      // unit all-gathers issued (persistent gathers not counted)
  int64_t prefetches = 0;   // of which issued ahead of need, from the trace
  int64_t reused = 0;       // fetches of a group that was still resident (kept or prefetched)
  int64_t evictions = 0;    // groups released early to stay within the budget
  int64_t divergences = 0;  // passes that left their trace
  int64_t gathered_elements = 0;
};

// Called at the end of every Fetch (the access's parameters are ready), with the stats then.
using FetchObserver = std::function<void(const ModuleAccess&, const CoordinatorStats&)>;
// Called for every planner action as it is carried out (groups numbered as planner().groups()).
using ActionObserver = std::function<void(const Stage3Action&)>;

class ParameterCoordinator {
 public:
  // `param_shard` holds this rank's layout.shard_elements() values of options.param_dtype (device
  // memory of the queue's device, or host memory with options.host_shard); it, and everything
  // else passed, must outlive the coordinator. `ops` (of the queue's device) unpacks the gathers.
  // InvalidArgument (naming zero_optimization.stage3_max_live_parameters) when an access cannot
  // fit the budget. With `nvme` (holding NvmeParamGroupsOf(layout, registry); it too must outlive
  // the coordinator) the pieces are read from it and `param_shard` is not read (may be null).
  static Result<std::unique_ptr<ParameterCoordinator>> Create(
      const CoordinatorOptions& options, const model::ParameterRegistry& registry,
      const ShardLayout& layout, CommQueue& queue, Stream& compute, ops::OpsBackend& ops,
      ZeroBinding& binding, const void* param_shard, offload::NvmeParamStore* nvme = nullptr);
  // Waits for the comm stream's work (gathers still in flight read the coordinator's plan).
  ~ParameterCoordinator();

  // (Re)gathers the persistent parameters from the shard, after the work enqueued on the compute
  // stream so far and before what is enqueued there next: after initialization and after every
  // optimizer step. Outside a pass.
  Status GatherPersistent();

  Status BeginPass(PassKind kind);
  // Before `access`'s unit runs: its parameters are bound when this returns, and gathered
  // before the work enqueued on the compute stream next.
  Status Fetch(const ModuleAccess& access);
  // After its work was enqueued: releases what is not kept for reuse.
  Status Release(const ModuleAccess& access);
  // Finishes recording (comparing the trace across ranks: collective on the first pass of each
  // kind) and releases every group.
  Status EndPass();

  const CoordinatorStats& stats() const { return stats_; }
  // The comm queue's staging memory (bytes) the largest gather needs.
  size_t LargestStagingBytes() const;
  void SetFetchObserver(FetchObserver observer) { observer_ = std::move(observer); }
  void SetActionObserver(ActionObserver observer) { action_observer_ = std::move(observer); }
  // The recorded trace of a pass kind, if any.
  const ModuleTrace* trace(PassKind kind) const;
  // Elements access of `unit` needs gathered at once (its groups, without persistent ones).
  int64_t UnitNeed(int unit) const { return planner_->UnitNeed(unit); }
  const CoordinatorOptions& options() const { return options_; }
  // The policy: one gather group per unit with non-persistent parameters, in unit order.
  const Stage3Planner& planner() const { return *planner_; }

 private:
  enum class State : uint8_t { kReleased, kInflight, kAvailable };
  struct Group {
    int unit = -1;
    int64_t numel = 0;
    State state = State::kReleased;
    DeviceBuffer buffer;
    CommTicket ticket;
  };

  ParameterCoordinator(const CoordinatorOptions& options, const model::ParameterRegistry& registry,
                       const ShardLayout& layout, CommQueue& queue, Stream& compute,
                       ops::OpsBackend& ops, ZeroBinding& binding, const void* param_shard);
  // Each rank's piece of a gather starts with a tag naming what it gathered (unit + 1, or
  // kPersistentTag), so ranks that run different modules fail at the first mismatched gather
  // instead of exchanging the wrong parameters.
  static constexpr uint32_t kPersistentTag = 0xffff;
  static constexpr uint32_t kFailedReadTag = 0xfffe;
  std::string TagName(uint32_t tag) const;
  // Enqueues the tagged all-gather of gather run `run` (group `run`, or the persistent
  // parameters when run == groups_.size(): the plan's run and the NVMe store's group alike):
  // this rank's `elements` at `shard_offset` of the shard, unpacked, widened, into `dense`
  // (`dense_numel` floats).
  Result<CommTicket> EnqueueGather(uint32_t tag, int run, int64_t shard_offset, int64_t elements,
                                   float* dense, int64_t dense_numel);
  Status Issue(int group);
  Status WaitFor(int group);
  Status ReleaseGroup(int group);
  // Carries out the planner's actions in order, counting them.
  Status Carry(const Stage3Step& step);
  void LeaveTrace(const ModuleAccess& access);
  Status CheckTraceAcrossRanks(const ModuleTrace& trace);

  CoordinatorOptions options_;
  const model::ParameterRegistry* registry_;
  const ShardLayout* layout_;
  CommQueue* queue_;
  Stream* compute_;
  ops::OpsBackend* ops_;
  ZeroBinding* binding_;
  const void* param_shard_;
  offload::NvmeParamStore* nvme_ = nullptr;
  std::vector<Group> groups_;
  std::unique_ptr<Stage3Planner> planner_;
  std::vector<int64_t> dense_offset_;  // per registry parameter: offset in its gathered buffer
  DeviceBuffer persistent_;
  std::unique_ptr<GatherPlan> plan_;

  std::optional<ModuleTrace> traces_[kNumPassKinds];
  ModuleTrace recording_;
  PassKind kind_ = PassKind::kTrain;
  bool recording_pass_ = false;  // the first pass of its kind
  bool in_pass_ = false;
  bool divergence_logged_ = false;
  CoordinatorStats stats_;
  FetchObserver observer_;
  ActionObserver action_observer_;
};

}  // namespace sluice::zero
