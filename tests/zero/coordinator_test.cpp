// The stage-3 parameter coordinator on N ranks (mpirun -np 1..4): driven directly over a real
// comm queue with a shard of known values (trace recording, prefetch, reuse, the hard budget,
// leaving the trace), and inside the engine (overlap with compute in a trace, budget-independent
// results, fp16 overflow on one rank, what each stage keeps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/zero/parameter_coordinator.h"
#include "runtime/check.h"
#include "runtime/device/device_factory.h"
#include "runtime/trace.h"
#include "tests/common/test_ops.h"
#include "zero_test_util.h"

namespace sluice::zero::testing {
namespace {

float Expected(int64_t flat) { return 0.5f * static_cast<float>(flat) + 1.0f; }

// A coordinator over a tiny GPT's registry whose shard holds Expected(flat index).
class CoordinatorRig {
 public:
  explicit CoordinatorRig(const CoordinatorOptions& options, int64_t persistence = 64) {
    Comm& world = TestWorld();
    // Under protection where the CPU has it: the gathers are stream work, the host touches no
    // device memory (the checks below read the gathered values back by copies).
    auto device = CreateDevice({.memory_limit_bytes = uint64_t{16} << 20,
                                .memory_protection = DeviceMemoryProtection::kAuto});
    SLUICE_CHECK(device.ok());
    device_ = std::move(device).value();
    ops_ = sluice::testing::CpuOpsOn(*device_);
    auto model = model::Model<float>::Create(TinyGpt(), host_, sluice::testing::OpsFor<float>(),
                                             model::ModelStorage::kExternal);
    SLUICE_CHECK(model.ok());
    model_ = std::move(model).value();
    layout_ = ShardLayout::Build(registry(), world.size(), world.rank(), persistence);
    binding_ = std::make_unique<ZeroBinding>(registry());
    shard_.assign(static_cast<size_t>(layout_.shard_elements()), 0.0f);
    for (const PartitionInfo& p : layout_.partitions()) {
      const ShardSpan owned = layout_.Owned(p);
      for (size_t e = 0; e < owned.count; ++e) {
        shard_[static_cast<size_t>(p.shard_offset) + e] =
            Expected(p.full_offset + static_cast<int64_t>(owned.offset + e));
      }
    }
    auto comm = world.Split(0, world.rank());
    SLUICE_CHECK(comm.ok());
    auto queue = CommQueue::Create(*device_, std::move(comm).value(), /*overlap=*/true);
    SLUICE_CHECK(queue.ok());
    queue_ = std::move(queue).value();
    auto compute = device_->CreateStream();
    SLUICE_CHECK(compute.ok());
    compute_ = std::move(compute).value();
    // The shard in device memory, as the engine keeps it without offload_param.
    auto device_shard = device_->Allocate(shard_.size() * sizeof(float), MemoryCategory::kParams);
    SLUICE_CHECK(device_shard.ok());
    device_shard_ = std::move(device_shard).value();
    SLUICE_CHECK(device_
                     ->CopyAsync(device_shard_.data(), shard_.data(), shard_.size() * sizeof(float),
                                 CopyKind::kH2D, *compute_)
                     .ok());
    SLUICE_CHECK(compute_->Synchronize().ok());
    auto coordinator = ParameterCoordinator::Create(
        options, registry(), layout_, *queue_, *compute_, *ops_, *binding_, device_shard_.data());
    SLUICE_CHECK(coordinator.ok()) << coordinator.status().ToString();
    coordinator_ = std::move(coordinator).value();
    SLUICE_CHECK(coordinator_->GatherPersistent().ok());
    // Complete before the test goes on: its next rig's MPI_Comm_split (which, unlike the
    // collectives, does not hold the device-memory key: runtime/comm/mpi) would otherwise
    // progress this gather into device memory from the main thread.
    SLUICE_CHECK(queue_->Synchronize().ok());
    coordinator_->SetFetchObserver([this](const ModuleAccess&, const CoordinatorStats& stats) {
      EXPECT_LE(stats.live, coordinator_->options().budgets.max_live_parameters);
      max_live_seen_ = std::max(max_live_seen_, stats.live);
    });
  }
  ~CoordinatorRig() {
    coordinator_.reset();
    queue_.reset();
    compute_.reset();
  }

  const model::ParameterRegistry& registry() const { return model_->registry(); }
  ParameterCoordinator& coordinator() { return *coordinator_; }
  const ShardLayout& layout() const { return layout_; }
  int units() const { return static_cast<int>(registry().units().size()); }
  int64_t max_live_seen() const { return max_live_seen_; }

  // The accesses of a training pass: forward 0..U-1, backward U-1..0.
  std::vector<ModuleAccess> TrainOrder() const {
    std::vector<ModuleAccess> order;
    for (int u = 0; u < units(); ++u) order.push_back({u, Phase::kForward});
    for (int u = units() - 1; u >= 0; --u) order.push_back({u, Phase::kBackward});
    return order;
  }

  // Runs a pass, checking after every fetch that each parameter the unit reads holds its values.
  Status RunPass(PassKind kind, const std::vector<ModuleAccess>& order) {
    SLUICE_RETURN_IF_ERROR(coordinator_->BeginPass(kind));
    for (const ModuleAccess& access : order) {
      SLUICE_RETURN_IF_ERROR(coordinator_->Fetch(access));
      for (int p : registry().units()[static_cast<size_t>(access.unit)].params) {
        const model::ParameterInfo& info = registry().parameter(p);
        const int64_t offset =
            info.is_alias() ? registry().parameter(info.tied_to).offset : info.offset;
        // Fetch only enqueues: the values are there once the compute stream reaches this point.
        std::vector<float> values(static_cast<size_t>(info.numel));
        SLUICE_RETURN_IF_ERROR(device_->CopyAsync(values.data(), binding_->Value(p),
                                                  values.size() * sizeof(float), CopyKind::kD2H,
                                                  *compute_));
        SLUICE_RETURN_IF_ERROR(compute_->Synchronize());
        for (int64_t e = 0; e < info.numel; ++e) {
          if (values[e] != Expected(offset + e)) {
            return InternalError("{} element {}: {} instead of {}", info.name, e, values[e],
                                 Expected(offset + e));
          }
        }
      }
      SLUICE_RETURN_IF_ERROR(coordinator_->Release(access));
      EXPECT_LE(coordinator_->stats().live, coordinator_->options().budgets.max_live_parameters);
    }
    return coordinator_->EndPass();
  }

 private:
  model::HostAllocator host_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<ops::OpsBackend> ops_;
  std::unique_ptr<model::Model<float>> model_;
  ShardLayout layout_;
  std::unique_ptr<ZeroBinding> binding_;
  std::vector<float> shard_;
  DeviceBuffer device_shard_;
  std::unique_ptr<CommQueue> queue_;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<ParameterCoordinator> coordinator_;
  int64_t max_live_seen_ = 0;
};

int64_t MaxUnitNeed(CoordinatorRig& rig) {
  int64_t need = 0;
  for (int u = 0; u < rig.units(); ++u) need = std::max(need, rig.coordinator().UnitNeed(u));
  return need;
}

TEST(Coordinator, RecordsThenPrefetchesByTrace) {
  CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
  options.budgets.prefetch_bucket_size = 6000;
  CoordinatorRig rig(options);
  const auto order = rig.TrainOrder();
  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, order).ok());
  const CoordinatorStats recorded = rig.coordinator().stats();
  EXPECT_EQ(recorded.prefetches, 0) << "nothing to prefetch by while recording";
  ASSERT_NE(rig.coordinator().trace(PassKind::kTrain), nullptr);
  EXPECT_EQ(rig.coordinator().trace(PassKind::kTrain)->size(), order.size());
  EXPECT_EQ(recorded.live, rig.layout().persistent_numel()) << "a pass ends with groups released";

  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, order).ok());
  const CoordinatorStats replayed = rig.coordinator().stats();
  EXPECT_GT(replayed.prefetches, 0);
  EXPECT_GT(replayed.reused, recorded.reused);
  EXPECT_EQ(replayed.divergences, 0);
  // Prefetching and reuse kept more gathered than a single unit.
  EXPECT_GT(rig.max_live_seen(), rig.layout().persistent_numel() + MaxUnitNeed(rig));
}

TEST(Coordinator, LiveParametersNeverExceedTheBudget) {
  CoordinatorOptions probe = CoordinatorOptionsOf(DefaultZeroOptions());
  CoordinatorRig sizing(probe);
  const int64_t budget = sizing.layout().persistent_numel() + MaxUnitNeed(sizing) + 500;

  CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
  options.budgets.prefetch_bucket_size =
      1000000;  // wants everything ahead: only the budget stops it
  options.budgets.max_live_parameters = budget;
  CoordinatorRig rig(options);
  for (int pass = 0; pass < 3; ++pass) {
    ASSERT_TRUE(rig.RunPass(PassKind::kTrain, rig.TrainOrder()).ok()) << pass;
  }
  EXPECT_LE(rig.max_live_seen(), budget);
  EXPECT_LE(rig.coordinator().stats().peak_live, budget);
  EXPECT_GT(rig.coordinator().stats().prefetches, 0) << "prefetching still happens within it";

  CoordinatorOptions exact = CoordinatorOptionsOf(DefaultZeroOptions());
  exact.budgets.max_live_parameters = budget - 500;
  CoordinatorRig minimal(exact);  // exactly the largest access: it fits
  ASSERT_TRUE(minimal.RunPass(PassKind::kTrain, minimal.TrainOrder()).ok());
  ASSERT_TRUE(minimal.RunPass(PassKind::kTrain, minimal.TrainOrder()).ok());
  EXPECT_LE(minimal.coordinator().stats().peak_live, budget - 500);
}

TEST(Coordinator, BudgetBelowOneUnitIsAConfigError) {
  CoordinatorOptions probe = CoordinatorOptionsOf(DefaultZeroOptions());
  CoordinatorRig sizing(probe);
  CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
  options.budgets.max_live_parameters =
      sizing.layout().persistent_numel() + MaxUnitNeed(sizing) - 1;
  ZeroBinding binding(sizing.registry());
  auto device = CreateDevice({.memory_limit_bytes = uint64_t{1} << 20});
  ASSERT_TRUE(device.ok());
  auto comm = TestWorld().Split(0, TestWorld().rank());
  ASSERT_TRUE(comm.ok());
  auto queue = CommQueue::Create(**device, std::move(comm).value(), true);
  ASSERT_TRUE(queue.ok());
  std::vector<float> shard(static_cast<size_t>(sizing.layout().shard_elements()));
  options.host_shard = true;
  auto compute = (*device)->CreateStream();
  ASSERT_TRUE(compute.ok());
  std::unique_ptr<ops::OpsBackend> ops = sluice::testing::CpuOpsOn(**device);
  auto coordinator = ParameterCoordinator::Create(options, sizing.registry(), sizing.layout(),
                                                  **queue, **compute, *ops, binding, shard.data());
  EXPECT_EQ(coordinator.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(coordinator.status().message().find("stage3_max_live_parameters"), std::string::npos)
      << coordinator.status().ToString();
}

TEST(Coordinator, ReuseDistanceKeepsGroupsAcrossNearbyUses) {
  int64_t gathers[2] = {0, 0};
  int64_t groups = 0;
  int64_t accesses_with_groups = 0;
  for (int keep = 0; keep < 2; ++keep) {
    CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
    options.budgets.prefetch_bucket_size = 0;  // isolate reuse from prefetching
    options.budgets.max_reuse_distance = keep ? 1000000000 : 0;
    CoordinatorRig rig(options);
    ASSERT_TRUE(rig.RunPass(PassKind::kTrain, rig.TrainOrder()).ok());
    const int64_t before = rig.coordinator().stats().gathers;
    ASSERT_TRUE(rig.RunPass(PassKind::kTrain, rig.TrainOrder()).ok());
    gathers[keep] = rig.coordinator().stats().gathers - before;
    EXPECT_EQ(rig.coordinator().stats().prefetches, 0);
    groups = 0;
    for (const UnitShards& unit : rig.layout().units()) groups += unit.gathered_numel > 0 ? 1 : 0;
    accesses_with_groups = 0;
    for (const ModuleAccess& a : rig.TrainOrder()) {
      accesses_with_groups += rig.coordinator().UnitNeed(a.unit) > 0 ? 1 : 0;
    }
  }
  // Distance 0: every access gathers again. Unlimited (and a budget that allows it): a group
  // stays gathered from its forward through its backward, one gather per group per pass.
  EXPECT_EQ(gathers[0], accesses_with_groups);
  EXPECT_EQ(gathers[1], groups);
}

TEST(Coordinator, LeavingTheTraceFallsBackOnDemandAndSaysSoOnce) {
  CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
  options.budgets.prefetch_bucket_size = 6000;
  CoordinatorRig rig(options);
  const auto order = rig.TrainOrder();
  auto swapped = order;
  std::swap(swapped[1], swapped[2]);  // blocks 0 and 1 run in the other order
  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, order).ok());
  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, order).ok());
  EXPECT_EQ(rig.coordinator().stats().divergences, 0);

  ::testing::internal::CaptureStderr();
  const Status first = rig.RunPass(PassKind::kTrain, swapped);
  const std::string first_log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(first.ok()) << first.ToString() << "; parameters are still right on demand";
  EXPECT_EQ(rig.coordinator().stats().divergences, 1);
  EXPECT_NE(first_log.find("left its recorded module trace at access 2: expected forward of "
                           "transformer.h.0, got forward of transformer.h.1"),
            std::string::npos)
      << first_log;
  EXPECT_NE(first_log.find("on demand"), std::string::npos);

  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, swapped).ok());
  const std::string second_log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rig.coordinator().stats().divergences, 2);
  EXPECT_EQ(second_log.find("module trace"), std::string::npos) << "said once: " << second_log;

  // Back on the trace: prefetching again.
  const int64_t prefetches = rig.coordinator().stats().prefetches;
  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, order).ok());
  EXPECT_GT(rig.coordinator().stats().prefetches, prefetches);
  EXPECT_EQ(rig.coordinator().stats().divergences, 2);
}

TEST(Coordinator, EvaluationPassesHaveTheirOwnTrace) {
  CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
  CoordinatorRig rig(options);
  std::vector<ModuleAccess> forward;
  for (int u = 0; u < rig.units(); ++u) forward.push_back({u, Phase::kForward});
  ASSERT_TRUE(rig.RunPass(PassKind::kEval, forward).ok());
  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, rig.TrainOrder()).ok());
  ASSERT_TRUE(rig.RunPass(PassKind::kEval, forward).ok());
  ASSERT_TRUE(rig.RunPass(PassKind::kTrain, rig.TrainOrder()).ok());
  EXPECT_EQ(rig.coordinator().stats().divergences, 0);
  EXPECT_EQ(rig.coordinator().trace(PassKind::kEval)->size(), forward.size());
}

TEST(Coordinator, RanksThatGatherDifferentModulesFailAtOnce) {
  if (TestWorld().size() < 2) GTEST_SKIP() << "needs two ranks";
  CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
  CoordinatorRig rig(options);
  auto order = rig.TrainOrder();
  // Blocks 0 and 1 have the same size: untagged, their gathers would match and exchange the
  // wrong parameters without any error.
  if (TestWorld().rank() == 1) std::swap(order[1], order[2]);
  const Status status = rig.RunPass(PassKind::kTrain, order);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("gathered transformer.h.1"), std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find("every rank must run the same modules in the same order"),
            std::string::npos)
      << status.ToString();
}

TEST(Coordinator, RanksWithDifferentTracesFailAtTheEndOfTheFirstPass) {
  if (TestWorld().size() < 2) GTEST_SKIP() << "needs two ranks";
  CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
  CoordinatorRig rig(options);
  auto order = rig.TrainOrder();
  // The final norm's parameters are all persistent: an extra use of it gathers nothing, so only
  // the trace comparison can notice it.
  const int final_norm = rig.units() - 2;
  ASSERT_EQ(rig.coordinator().UnitNeed(final_norm), 0);
  if (TestWorld().rank() == 1) order.insert(order.begin() + 4, {final_norm, Phase::kForward});
  const Status status = rig.RunPass(PassKind::kTrain, order);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("the number of unit accesses of the first training pass: 10 "
                                  "on rank"),
            std::string::npos)
      << status.ToString();
}

// ---------------------------------------------------------------- inside the engine, stage 3

// All-gathers one finite float per rank (a plain copy).
std::vector<float> GatherFloats(float mine) {
  Comm& world = TestWorld();
  std::vector<float> all(static_cast<size_t>(world.size()));
  SLUICE_CHECK(world.AllGather(&mine, all.data(), all.size(), DType::kF32).ok());
  return all;
}

ZeroOptions Stage3(int64_t budget = 1000000000) {
  ZeroOptions o = DefaultZeroOptions();
  o.stage = 3;
  o.overlap_comm = true;
  o.num_threads = 1;
  o.reduce_bucket_size = 20000;
  o.stage3_prefetch_bucket_size = 20000;
  o.stage3_param_persistence_threshold = 128;
  o.stage3_max_live_parameters = budget;
  return o;
}

bool Overlaps(const TraceEvent& a, const TraceEvent& b) {
  return a.start_ns < b.end_ns && b.start_ns < a.end_ns;
}

TEST(Stage3Engine, GatherOfTheNextUnitOverlapsComputeOfThisOne) {
  if (TestWorld().size() < 2) {
    // With one rank an all-gather is a local copy of about 0.1 ms: it shows beside the compute
    // only when a second core happens to be free at that moment, which a loaded 2-core CI
    // machine does not promise. With peers, a gather lasts until every rank has issued it.
    GTEST_SKIP() << "the overlap is asserted with two or more ranks";
  }
  TraceRecorder& recorder = TraceRecorder::Global();
  for (bool overlap : {true, false}) {
    // A budget of two blocks: the backward gathers the blocks again, so both directions of the
    // trace have a next unit to prefetch.
    const model::ModelOptions model = SlowerGpt();
    model::HostAllocator host;
    auto sizing = model::Model<float>::Create(model, host, sluice::testing::OpsFor<float>(),
                                              model::ModelStorage::kExternal);
    ASSERT_TRUE(sizing.ok());
    const ShardLayout layout = ShardLayout::Build((*sizing)->registry(), TestWorld().size(), 0,
                                                  Stage3().stage3_param_persistence_threshold);
    int64_t block = 0;
    for (const UnitShards& unit : layout.units()) block = std::max(block, unit.gathered_numel);
    ZeroOptions options = Stage3(layout.persistent_numel() + 2 * block);
    options.overlap_comm = overlap;
    options.stage3_prefetch_bucket_size = block;
    Result<ZeroRig> rig = MakeZeroRig(options, model, TestWorld(), 3);
    ASSERT_TRUE(rig.ok()) << rig.status().ToString();
    TrainSettings settings;
    settings.steps = 1;
    settings.sequences_per_rank = 4;
    ASSERT_TRUE(RunZero(*rig, settings).ok());  // the first step records the trace
    const model::ParameterRegistry& registry = rig->model->registry();
    const std::vector<std::vector<int>> reads = StorageUnitsReadBy(registry);
    // The overlap is structural (the gather of the next unit is issued before this unit
    // computes), but whether it shows in a trace depends on the scheduler: on a busy 2-core
    // machine a small gather can finish before the compute event starts on every rank. So up to
    // three traced runs, each judged on all ranks together (the decision to retry is the same on
    // every rank): one that shows the overlap proves it.
    std::vector<TraceEvent> events;
    int64_t overlap_ns = 0;
    int pairs = 0;
    float overlap_all_ranks = 0.0f;
    float all_pairs = 0.0f;
    for (int attempt = 0; attempt < 3; ++attempt) {
      recorder.Clear();
      recorder.Enable();
      settings.steps = 2;
      Result<RunResult> run = RunZero(*rig, settings);
      recorder.Disable();
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      events = recorder.Snapshot();
      overlap_ns = TraceOverlapNs(events, kTraceLaneComm, kTraceLaneCompute);
      if (!overlap) break;
      // For consecutive accesses a, b of the trace: a gather that b needs runs while a computes
      // (the gather of block i+1 beside the forward of block i; of block i-1 beside the
      // backward of block i).
      const ModuleTrace& trace = *rig->engine->coordinator()->trace(PassKind::kTrain);
      pairs = 0;
      for (size_t k = 0; k + 1 < trace.size(); ++k) {
        const std::string computing = DescribeAccess(trace[k], registry);
        for (int owner : reads[static_cast<size_t>(trace[k + 1].unit)]) {
          const std::string gathering = "all_gather " + registry.units()[owner].name;
          for (const TraceEvent& compute : events) {
            if (compute.name != computing) continue;
            for (const TraceEvent& gather : events) {
              if (gather.name == gathering && Overlaps(compute, gather)) ++pairs;
            }
          }
        }
      }
      // Summed over the ranks: the rank that issues a gather last may find it complete at once.
      overlap_all_ranks = 0.0f;
      for (float ns : GatherFloats(static_cast<float>(overlap_ns))) overlap_all_ranks += ns;
      all_pairs = 0.0f;
      for (float p : GatherFloats(static_cast<float>(pairs))) all_pairs += p;
      if (overlap_all_ranks > 0.0f && all_pairs > 0.0f) break;
    }
    const CoordinatorStats& stats = rig->engine->coordinator()->stats();
    EXPECT_LE(stats.peak_live, options.stage3_max_live_parameters);
    if (!overlap) {
      EXPECT_EQ(overlap_ns, 0) << "overlap_comm off: every collective is waited for at once";
      continue;
    }
    EXPECT_GT(overlap_all_ranks, 0.0f);
    EXPECT_GT(stats.prefetches, 0);
    EXPECT_GT(all_pairs, 0.0f) << "no gather for the next unit overlapped this unit's compute";
    if (TestWorld().rank() == 0) {
      const std::string path = ::testing::TempDir() + "zero_stage3_trace.json";
      EXPECT_TRUE(recorder.WriteChromeTrace(path, 0).ok());
      std::printf(
          "stage-3 trace (rank 0): %s; comm/compute overlap %.3f ms; %d gathers for the next "
          "unit beside this unit's compute (%.0f on all ranks); peak live %lld of budget %lld "
          "(model %lld)\n",
          path.c_str(), overlap_ns / 1e6, pairs, all_pairs, static_cast<long long>(stats.peak_live),
          static_cast<long long>(options.stage3_max_live_parameters),
          static_cast<long long>(rig->engine->layout().total_elements()));
    }
  }
  recorder.Clear();
}

TEST(Stage3Engine, BudgetPrefetchAndPersistenceDoNotChangeTheResults) {
  TrainSettings settings;
  settings.steps = 5;
  settings.world = TestWorld().size();
  Result<ZeroRig> plain = MakeZeroRig(Stage3(), TinyGpt(), TestWorld(), 9);
  ASSERT_TRUE(plain.ok());
  Result<RunResult> want = RunZero(*plain, settings);
  ASSERT_TRUE(want.ok());

  // The smallest budget that fits the largest unit, no persistence, no reuse, no overlap.
  ZeroOptions tight = Stage3();
  tight.stage3_param_persistence_threshold = 0;
  tight.stage3_max_reuse_distance = 0;
  tight.overlap_comm = false;
  int64_t need = 0;
  for (size_t u = 0; u < plain->model->registry().units().size(); ++u) {
    const ShardLayout layout =
        ShardLayout::Build(plain->model->registry(), TestWorld().size(), 0, 0);
    need = std::max(need, layout.units()[u].gathered_numel);
  }
  // The tied head needs the embeddings' group; that is the largest access here.
  tight.stage3_max_live_parameters = need;
  Result<ZeroRig> rig = MakeZeroRig(tight, TinyGpt(), TestWorld(), 9);
  ASSERT_TRUE(rig.ok()) << rig.status().ToString();
  int64_t fetches = 0;
  rig->engine->coordinator()->SetFetchObserver(
      [&](const ModuleAccess&, const CoordinatorStats& stats) {
        ++fetches;
        EXPECT_LE(stats.live, tight.stage3_max_live_parameters);
      });
  Result<RunResult> got = RunZero(*rig, settings);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT(fetches, 0);
  EXPECT_LE(rig->engine->coordinator()->stats().peak_live, need);
  // Gathers only copy: the results are the same bits.
  EXPECT_EQ(std::memcmp(got->losses.data(), want->losses.data(), want->losses.size() * 8), 0);
  EXPECT_EQ(std::memcmp(got->params.data(), want->params.data(), want->params.size() * 4), 0);
}

// ---------------------------------------------------------------- across shards and ranks

TEST(ZeroStep, Fp16OverflowOnOneShardSkipsTheStepOnEveryRank) {
  for (int stage = 1; stage <= 3; ++stage) {
    ZeroOptions options = Stage3();
    options.stage = stage;
    options.param_dtype = DType::kF16;
    const int world = TestWorld().size();
    const Batch local =
        SliceBatch(MakeBatch(TinyGpt(), 0, 0, 2 * world), TestWorld().rank(), world);
    // Probe: the unscaled gradient of the first step, to find its largest element.
    Result<ZeroRig> probe = MakeZeroRig(options, TinyGpt(), TestWorld(), 4);
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    ASSERT_TRUE(probe->engine
                    ->ForwardBackward(local.inputs.data(), local.targets.data(), local.batch,
                                      local.seq, 1.0)
                    .ok());
    float largest = 0.0f;
    float second = 0.0f;
    Result<std::vector<float>> probed = probe->engine->ReadStepGradients();
    ASSERT_TRUE(probed.ok()) << probed.status().ToString();
    for (float g : *probed) {
      const float a = std::abs(g);
      if (a > largest) {
        second = largest;
        largest = a;
      } else if (a > second) {
        second = a;
      }
    }
    std::vector<float> largest_by_rank = GatherFloats(largest);
    std::vector<float> second_by_rank = GatherFloats(second);
    const auto top = std::max_element(largest_by_rank.begin(), largest_by_rank.end());
    float runner_up = 0.0f;
    for (int r = 0; r < world; ++r) {
      runner_up = std::max(runner_up, r == top - largest_by_rank.begin()
                                          ? second_by_rank[static_cast<size_t>(r)]
                                          : largest_by_rank[static_cast<size_t>(r)]);
    }
    ASSERT_LT(runner_up, *top * 0.99f) << "the largest gradient element must stand out";
    // A loss scale between the two: only the largest element passes fp16's 65504.
    const double scale = 65520.0 / std::sqrt(static_cast<double>(*top) * runner_up);

    Result<ZeroRig> rig = MakeZeroRig(options, TinyGpt(), TestWorld(), 4);
    ASSERT_TRUE(rig.ok());
    std::vector<float> before(static_cast<size_t>(rig->engine->layout().total_elements()));
    ASSERT_TRUE(rig->engine->GatherFullParameters(before).ok());
    ASSERT_TRUE(rig->engine
                    ->ForwardBackward(local.inputs.data(), local.targets.data(), local.batch,
                                      local.seq, scale)
                    .ok());
    Result<ZeroStepResult> step = rig->engine->Step({.lr = 1e-3, .loss_scale = scale});
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    EXPECT_TRUE(step->overflow) << "stage " << stage << ": every rank skips";
    const std::vector<float> local_flags = GatherFloats(step->local_overflow ? 1.0f : 0.0f);
    float overflowing_ranks = 0.0f;
    for (float flag : local_flags) overflowing_ranks += flag;
    EXPECT_EQ(overflowing_ranks, 1.0f) << "stage " << stage << ": one shard held the inf";
    EXPECT_EQ(local_flags[static_cast<size_t>(top - largest_by_rank.begin())], 1.0f);
    std::vector<float> after(before.size());
    ASSERT_TRUE(rig->engine->GatherFullParameters(after).ok());
    EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * 4), 0);
    EXPECT_EQ(rig->engine->optimizer().step(), 0);

    // The next step, at a scale that fits, goes through.
    ASSERT_TRUE(rig->engine
                    ->ForwardBackward(local.inputs.data(), local.targets.data(), local.batch,
                                      local.seq, 1.0)
                    .ok());
    step = rig->engine->Step({.lr = 1e-3});
    ASSERT_TRUE(step.ok());
    EXPECT_FALSE(step->overflow);
    EXPECT_EQ(rig->engine->optimizer().step(), 1);
  }
}

TEST(ZeroStep, EachStageKeepsWhatItPromises) {
  const int world = TestWorld().size();
  TrainSettings settings;
  settings.steps = 1;
  settings.world = world;
  for (int stage = 0; stage <= 3; ++stage) {
    ZeroOptions options = Stage3();
    options.stage = stage;
    Result<ZeroRig> rig = MakeZeroRig(options, TinyGpt(), TestWorld(), 2);
    ASSERT_TRUE(rig.ok());
    ASSERT_TRUE(RunZero(*rig, settings).ok());
    const ZeroEngine& engine = *rig->engine;
    const uint64_t total = static_cast<uint64_t>(engine.layout().total_elements()) * 4;
    const uint64_t shard = static_cast<uint64_t>(engine.layout().shard_elements()) * 4;
    const ZeroMemory m = engine.memory();
    // f32: the master weights are the parameter shard, so the state is exp_avg + exp_avg_sq.
    EXPECT_EQ(m.optimizer_state, 2 * (stage == 0 ? total : shard)) << stage;
    EXPECT_EQ(m.full_params, stage <= 2 ? total : 0) << stage;
    EXPECT_EQ(m.full_grads, stage <= 1 ? total : 0) << stage;
    EXPECT_EQ(m.grad_shard, stage >= 1 ? shard : 0) << stage;
    // Stage 0 with f32 keeps one copy of the parameters (the compute copy is the shard): the
    // fields, summed, count it once.
    EXPECT_EQ(m.param_shard, stage == 0 ? 0 : shard) << stage;
    if (stage >= 1) {
      EXPECT_LE(shard,
                total / static_cast<uint64_t>(world) + 4 * engine.layout().partitions().size())
          << "a shard is 1/N of the model plus at most one padding element per parameter";
    }
    if (stage == 3) {
      EXPECT_LT(engine.coordinator()->stats().peak_live, engine.layout().total_elements());
    }
  }
}

TEST(ZeroStep, EvaluationAgreesAcrossStages) {
  const int world = TestWorld().size();
  TrainSettings settings;
  settings.steps = 2;
  settings.world = world;
  const Batch eval = SliceBatch(MakeBatch(TinyGpt(), 99, 0, 2 * world), TestWorld().rank(), world);
  double stage0 = 0.0;
  for (int stage = 0; stage <= 3; ++stage) {
    ZeroOptions options = Stage3();
    options.stage = stage;
    Result<ZeroRig> rig = MakeZeroRig(options, TinyGpt(), TestWorld(), 6);
    ASSERT_TRUE(rig.ok());
    ASSERT_TRUE(RunZero(*rig, settings).ok());
    double mean = 0.0;
    for (int pass = 0; pass < 2; ++pass) {  // stage 3: records, then replays its own trace
      Result<double> loss =
          rig->engine->ForwardLoss(eval.inputs.data(), eval.targets.data(), eval.batch, eval.seq);
      ASSERT_TRUE(loss.ok()) << loss.status().ToString();
      Result<double> averaged = rig->engine->MeanAcrossRanks(*loss);
      ASSERT_TRUE(averaged.ok());
      if (pass == 1) {
        EXPECT_EQ(*averaged, mean) << "the same parameters, the same loss";
      }
      mean = *averaged;
    }
    if (stage == 0) stage0 = mean;
    EXPECT_NEAR(mean, stage0, 1e-6 * stage0) << "stage " << stage;
    if (stage == 3) {
      EXPECT_EQ(rig->engine->coordinator()->stats().divergences, 0);
    }
  }
}

}  // namespace
}  // namespace sluice::zero::testing
