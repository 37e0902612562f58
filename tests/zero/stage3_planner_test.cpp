// The stage-3 planner (engine/zero/stage3_planner.h): its decisions on hand-made traces, and the
// issue's check that the memory estimator, which replays the planner, agrees with a real stage-3
// engine eviction for eviction (mpirun -np 1..2).
#include "engine/zero/stage3_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "engine/estimate/model_layout.h"
#include "engine/estimate/zero_simulation.h"
#include "engine/zero/parameter_coordinator.h"
#include "zero_test_util.h"

namespace sluice::zero {

// gtest's printer for the actions compared below.
void PrintTo(const Stage3Action& action, std::ostream* out) {
  *out << Stage3ActionName(action.kind) << " " << action.group;
}

namespace {

using K = Stage3ActionKind;
using Actions = std::vector<Stage3Action>;

constexpr int64_t kLots = 1000000;

// Units 0..n-1, each owning one group of `numel` elements.
Stage3Planner OneGroupPerUnit(int units, int64_t numel, int64_t persistent,
                              const Stage3Budgets& budgets) {
  std::vector<Stage3Group> groups;
  std::vector<std::vector<int>> needs;
  for (int u = 0; u < units; ++u) {
    groups.push_back({u, numel});
    needs.push_back({u});
  }
  return Stage3Planner(std::move(groups), std::move(needs), persistent, budgets);
}

ModuleTrace TraceOf(const std::vector<int>& units) {
  ModuleTrace trace;
  for (int u : units) trace.Append({u, Phase::kForward});
  return trace;
}

std::string Describe(const Actions& actions) {
  std::string text;
  for (const Stage3Action& a : actions) {
    text += std::string(Stage3ActionName(a.kind)) + " " + std::to_string(a.group) + "; ";
  }
  return text;
}

// Runs a pass over `accesses` (with `trace`, or none) and returns every action, in order.
Actions RunPass(Stage3Planner& planner, const ModuleTrace* trace,
                const std::vector<int>& accesses) {
  Actions all;
  const auto take = [&all](const Stage3Step& step) {
    all.insert(all.end(), step.actions.begin(), step.actions.end());
  };
  take(planner.BeginPass(trace));
  for (int u : accesses) {
    take(planner.Fetch({u, Phase::kForward}));
    take(planner.Release({u, Phase::kForward}));
  }
  take(planner.EndPass());
  return all;
}

TEST(Stage3Planner, WithoutATraceFetchesOnDemandAndReleasesAfterUse) {
  Stage3Planner planner = OneGroupPerUnit(3, 10, 5, {kLots, kLots, kLots});
  const Actions actions = RunPass(planner, nullptr, {0, 1, 2, 1});
  EXPECT_EQ(actions, (Actions{{K::kGather, 0},
                              {K::kRelease, 0},
                              {K::kGather, 1},
                              {K::kRelease, 1},
                              {K::kGather, 2},
                              {K::kRelease, 2},
                              {K::kGather, 1},
                              {K::kRelease, 1}}))
      << Describe(actions);
  EXPECT_EQ(planner.peak_live(), 5 + 10);
  EXPECT_EQ(planner.live(), 5) << "the persistent elements stay";
}

TEST(Stage3Planner, PrefetchGathersAheadWhileBelowTheBucket) {
  Stage3Planner planner = OneGroupPerUnit(4, 10, 0, {25, kLots, kLots});
  const ModuleTrace trace = TraceOf({0, 1, 2, 3});
  // 0, 10, 20 elements ahead are below 25: three groups before the first access.
  EXPECT_EQ(planner.BeginPass(&trace).actions,
            (Actions{{K::kPrefetch, 0}, {K::kPrefetch, 1}, {K::kPrefetch, 2}}));
  const Stage3Step fetch = planner.Fetch({0, Phase::kForward});
  EXPECT_EQ(fetch.reused, 1);
  EXPECT_EQ(fetch.actions, (Actions{{K::kPrefetch, 3}})) << "groups 1 and 2 ahead: 20 < 25";
  EXPECT_EQ(planner.Release({0, Phase::kForward}).actions, (Actions{{K::kRelease, 0}}))
      << "not used again";
}

// The case the estimator's old copy of the policy got wrong: its prefetch stopped at the budget,
// the engine's evicts a group needed later than the one it brings.
TEST(Stage3Planner, PrefetchEvictsOnlyGroupsNeededLaterThanTheOneItBrings) {
  Stage3Planner planner = OneGroupPerUnit(3, 10, 0, {kLots, 20, kLots});
  const ModuleTrace trace = TraceOf({0, 1, 2, 2, 1, 0});
  // Room for two groups; the third (needed at 2) would only push out groups needed at 0 and 1.
  EXPECT_EQ(planner.BeginPass(&trace).actions, (Actions{{K::kPrefetch, 0}, {K::kPrefetch, 1}}));
  EXPECT_EQ(planner.Fetch({0, Phase::kForward}).actions, Actions{});
  EXPECT_EQ(planner.Release({0, Phase::kForward}).actions, Actions{}) << "kept: used at 5";
  // Group 0 is next needed at 5, after group 2 (at 2): it goes, group 2 comes.
  EXPECT_EQ(planner.Fetch({1, Phase::kForward}).actions,
            (Actions{{K::kEvict, 0}, {K::kPrefetch, 2}}));
  EXPECT_EQ(planner.Release({1, Phase::kForward}).actions, Actions{});
  // Group 0 (at 5) would push out group 1 (at 4): no prefetch.
  EXPECT_EQ(planner.Fetch({2, Phase::kForward}).actions, Actions{});
  EXPECT_EQ(planner.Release({2, Phase::kForward}).actions, Actions{});
  EXPECT_EQ(planner.Fetch({2, Phase::kForward}).actions, Actions{});
  EXPECT_EQ(planner.Release({2, Phase::kForward}).actions, (Actions{{K::kRelease, 2}}));
  EXPECT_EQ(planner.Fetch({1, Phase::kForward}).actions, (Actions{{K::kPrefetch, 0}}));
  EXPECT_EQ(planner.Release({1, Phase::kForward}).actions, (Actions{{K::kRelease, 1}}));
  const Stage3Step last = planner.Fetch({0, Phase::kForward});
  EXPECT_EQ(last.actions, Actions{});
  EXPECT_EQ(last.reused, 1);
  EXPECT_EQ(planner.Release({0, Phase::kForward}).actions, (Actions{{K::kRelease, 0}}));
  EXPECT_EQ(planner.EndPass().actions, Actions{});
  EXPECT_EQ(planner.peak_live(), 20);
}

TEST(Stage3Planner, FetchEvictsTheGroupUsedFarthestAhead) {
  Stage3Planner planner = OneGroupPerUnit(3, 10, 0, {0, 20, kLots});
  const ModuleTrace trace = TraceOf({0, 1, 2, 0, 1});
  // Both 0 and 1 are kept for reuse; 2 needs room: 1 (used at 4) goes, not 0 (used at 3).
  const Actions actions = RunPass(planner, &trace, {0, 1, 2, 0, 1});
  EXPECT_EQ(actions, (Actions{{K::kGather, 0},
                              {K::kGather, 1},
                              {K::kEvict, 1},
                              {K::kGather, 2},
                              {K::kRelease, 2},
                              {K::kRelease, 0},
                              {K::kGather, 1},
                              {K::kRelease, 1}}))
      << Describe(actions);
  EXPECT_EQ(planner.peak_live(), 20);
}

TEST(Stage3Planner, ReuseKeepsGroupsUsedAgainWithinTheDistance) {
  // Between the two uses of group 0 lie 30 elements, between those of group 1 10.
  const ModuleTrace trace = TraceOf({0, 1, 2, 1, 0});
  const auto gathers = [&trace](int64_t distance) {
    Stage3Planner planner = OneGroupPerUnit(3, 10, 0, {0, kLots, distance});
    int count = 0;
    for (const Stage3Action& a : RunPass(planner, &trace, {0, 1, 2, 1, 0})) {
      count += a.kind == K::kGather ? 1 : 0;
    }
    return count;
  };
  EXPECT_EQ(gathers(0), 5);
  EXPECT_EQ(gathers(11), 4) << "group 1 kept";
  EXPECT_EQ(gathers(30), 4) << "group 0's distance is not below 30";
  EXPECT_EQ(gathers(31), 3);
}

TEST(Stage3Planner, LeavingTheTraceFetchesOnDemandForTheRestOfThePass) {
  Stage3Planner planner = OneGroupPerUnit(3, 10, 0, {10, kLots, kLots});
  const ModuleTrace trace = TraceOf({0, 1, 2});
  EXPECT_EQ(planner.BeginPass(&trace).actions, (Actions{{K::kPrefetch, 0}}));
  const Stage3Step on = planner.Fetch({0, Phase::kForward});
  EXPECT_FALSE(on.left_trace);
  EXPECT_EQ(on.actions, (Actions{{K::kPrefetch, 1}}));
  (void)planner.Release({0, Phase::kForward});
  const Stage3Step off = planner.Fetch({2, Phase::kForward});
  EXPECT_TRUE(off.left_trace);
  EXPECT_FALSE(planner.replaying());
  EXPECT_EQ(planner.position(), 1u) << "where it left: the trace expected access 1";
  EXPECT_EQ(off.actions, (Actions{{K::kGather, 2}})) << "no prefetch off the trace";
  EXPECT_EQ(planner.Release({2, Phase::kForward}).actions, (Actions{{K::kRelease, 2}}));
  const Stage3Step again = planner.Fetch({1, Phase::kForward});
  EXPECT_FALSE(again.left_trace) << "reported once per pass";
  EXPECT_EQ(again.reused, 1) << "prefetched before the pass left its trace";
  EXPECT_EQ(planner.Release({1, Phase::kForward}).actions, (Actions{{K::kRelease, 1}}));
  EXPECT_EQ(planner.EndPass().actions, Actions{});
  // The next pass replays the trace again.
  EXPECT_FALSE(planner.BeginPass(&trace).actions.empty());
  EXPECT_TRUE(planner.replaying());
}

TEST(Stage3Planner, UnitsThatReadTheSameGroupShareOneGather) {
  // Unit 1 reads unit 0's group (a tied LM head); unit 2 has its own.
  Stage3Planner planner({{0, 10}, {2, 10}}, {{0}, {0}, {1}}, 0, {0, 20, kLots});
  const ModuleTrace trace = TraceOf({0, 1, 2, 1, 0});
  const Actions actions = RunPass(planner, &trace, {0, 1, 2, 1, 0});
  EXPECT_EQ(actions,
            (Actions{{K::kGather, 0}, {K::kGather, 1}, {K::kRelease, 1}, {K::kRelease, 0}}))
      << Describe(actions);
  EXPECT_EQ(planner.UnitNeed(1), 10);
}

TEST(Stage3Planner, NamesTheFirstUnitThatCannotFitTheBudget) {
  Stage3Planner fits({{0, 10}, {1, 20}}, {{0}, {1}, {}}, 5, {0, 25, 0});
  EXPECT_EQ(fits.UnitOverBudget(), -1);
  Stage3Planner tight({{0, 10}, {1, 20}}, {{0}, {1}, {}}, 5, {0, 24, 0});
  EXPECT_EQ(tight.UnitOverBudget(), 1);
}

// ---------------------------------------------------------------- the engine and the estimate

using testing::MakeZeroRig;
using testing::RunZero;
using testing::TestWorld;
using testing::TinyGpt;
using testing::TrainSettings;

struct EngineAction {
  K kind;
  int unit;
  bool operator==(const EngineAction&) const = default;
};

std::string Describe(const std::vector<EngineAction>& actions) {
  std::string text;
  for (const EngineAction& a : actions) {
    text += std::string(Stage3ActionName(a.kind)) + " " + std::to_string(a.unit) + "; ";
  }
  return text;
}

// Evictions the planner makes to prefetch (the estimator's old copy never did): in a fetch's
// actions, those with no gather after them (a fetch's own evictions precede its gathers).
int PrefetchEvictions(const Stage3Planner& model, const ModuleTrace& trace) {
  Stage3Planner planner = model;
  int evictions = 0;
  (void)planner.BeginPass(&trace);
  for (const ModuleAccess& access : trace.accesses()) {
    const Actions actions = planner.Fetch(access).actions;
    for (size_t i = 0; i < actions.size(); ++i) {
      if (actions[i].kind != K::kEvict) continue;
      bool gathered_after = false;
      for (size_t k = i + 1; k < actions.size(); ++k) {
        gathered_after = gathered_after || actions[k].kind == K::kGather;
      }
      evictions += gathered_after ? 0 : 1;
    }
    (void)planner.Release(access);
  }
  (void)planner.EndPass();
  return evictions;
}

TEST(Stage3PlannerEngine, EstimatorReplaysTheEnginesEvictionsOneForOne) {
  const model::ModelOptions model = TinyGpt();
  const int64_t threshold = 128;
  const std::vector<estimate::UnitLayout> layout = estimate::DescribeUnits(model);
  const std::vector<estimate::ZeroUnit> units = estimate::ExpandUnits(layout, threshold);
  const int64_t embeddings = units.front().gathered;
  int64_t block = 0;
  for (const estimate::ZeroUnit& unit : units) block = std::max(block, unit.gathered);
  estimate::CoordinatorLimits limits;
  limits.world = TestWorld().size();
  limits.persistent = estimate::SummarizeLayout(layout, threshold).persistent_elements;
  limits.budgets.prefetch_bucket_size = 3 * block;  // ahead by more than the budget allows
  limits.budgets.max_reuse_distance = 1000000000;   // everything is kept for its backward
  // Room for two blocks: replaying, the engine evicts the groups its forward kept to prefetch the
  // next block. The estimator's old copy of the policy, whose prefetch stopped at the budget,
  // put the peak at one block and the embeddings here.
  limits.budgets.max_live_parameters = limits.persistent + 2 * block;

  ZeroOptions options = DefaultZeroOptions();
  options.stage = 3;
  options.overlap_comm = true;
  options.num_threads = 1;
  options.reduce_bucket_size = 20000;
  options.stage3_param_persistence_threshold = threshold;
  options.stage3_prefetch_bucket_size = limits.budgets.prefetch_bucket_size;
  options.stage3_max_reuse_distance = limits.budgets.max_reuse_distance;
  options.stage3_max_live_parameters = limits.budgets.max_live_parameters;
  Result<testing::ZeroRig> rig = MakeZeroRig(options, model, TestWorld(), 3);
  ASSERT_TRUE(rig.ok()) << rig.status().ToString();
  ParameterCoordinator& coordinator = *rig->engine->coordinator();
  ASSERT_EQ(coordinator.planner().persistent(), limits.persistent);

  // What the engine does: every action its coordinator carries out, per training step (one
  // pass each: the first records the trace, the others replay it).
  std::vector<EngineAction> done;
  coordinator.SetActionObserver([&](const Stage3Action& action) {
    done.push_back({action.kind, coordinator.planner().groups()[action.group].unit});
  });
  std::vector<size_t> step_ends;
  TrainSettings settings;
  settings.steps = 3;
  settings.world = TestWorld().size();
  Result<testing::RunResult> run =
      RunZero(*rig, settings, [&](int64_t) { step_ends.push_back(done.size()); });
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(step_ends.size(), 3u);

  // What the estimator replays.
  const estimate::CoordinatorReplay replay = estimate::ReplayCoordinator(units, limits);
  std::vector<EngineAction> replayed[2];
  for (const estimate::CoordinatorEvent& event : replay.events) {
    replayed[event.pass].push_back({event.kind, event.unit});
  }
  const std::vector<EngineAction> passes[3] = {
      {done.begin(), done.begin() + static_cast<ptrdiff_t>(step_ends[0])},
      {done.begin() + static_cast<ptrdiff_t>(step_ends[0]),
       done.begin() + static_cast<ptrdiff_t>(step_ends[1])},
      {done.begin() + static_cast<ptrdiff_t>(step_ends[1]),
       done.begin() + static_cast<ptrdiff_t>(step_ends[2])}};
  EXPECT_EQ(passes[0], replayed[0])
      << "engine: " << Describe(passes[0]) << "\nestimate: " << Describe(replayed[0]);
  for (int pass = 1; pass < 3; ++pass) {
    EXPECT_EQ(passes[pass], replayed[1])
        << "pass " << pass << "\nengine: " << Describe(passes[pass])
        << "\nestimate: " << Describe(replayed[1]);
  }

  // The case is one where the old estimator differed: replays evict to prefetch.
  const ModuleTrace* trace = coordinator.trace(PassKind::kTrain);
  ASSERT_NE(trace, nullptr);
  EXPECT_GT(PrefetchEvictions(coordinator.planner(), *trace), 0);
  const CoordinatorStats& stats = coordinator.stats();
  int64_t evictions = 0;
  for (const estimate::CoordinatorEvent& event : replay.events) {
    evictions += event.kind == K::kEvict ? (event.pass == 0 ? 1 : 2) : 0;  // 2 replays ran
  }
  EXPECT_GT(stats.evictions, 0);
  EXPECT_EQ(stats.evictions, evictions);
  // The same peak of gathered elements, within the budget, above the old copy's.
  EXPECT_EQ(stats.peak_live - limits.persistent, replay.peaks.gathered_elements);
  EXPECT_GT(replay.peaks.gathered_elements, block + embeddings);
  EXPECT_LE(stats.peak_live, limits.budgets.max_live_parameters);
  // The largest gather's staging: a unit's or the persistent parameters' (fp32 here).
  const int64_t persistent_staging =
      limits.world * (rig->engine->layout().persistent_elements() + 1);
  EXPECT_EQ(
      coordinator.LargestStagingBytes(),
      4u * static_cast<size_t>(std::max(replay.peaks.largest_gather_staging, persistent_staging)));
}

}  // namespace
}  // namespace sluice::zero
