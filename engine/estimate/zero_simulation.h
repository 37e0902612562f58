// What the ZeRO engine (engine/zero) holds at its peaks, replayed from the model layout without
// running it: the stage-3 parameter coordinator's live set and the stage-2/3 gradient reducer's
// unit buffers and buckets (reduce_scatter_reducer.h), plus the shard and bucket sizes of the
// per-parameter shard layout (shard_layout.h: every parameter cut into ceil(numel / N) elements
// per rank).
//
// The coordinator is not imitated: its policy (prefetch by trace, reuse distance, live budget
// with eviction) is one function, zero::Stage3Planner (engine/zero/stage3_planner.h), which the
// engine's ParameterCoordinator carries out and ReplayCoordinator runs here over training
// passes (the forward of every unit in order, then their backwards in reverse): the first
// records the trace and fetches on demand, the second replays it (every later pass repeats the
// second: each starts with nothing but the persistent parameters gathered). The reducer replay
// follows the rules its header documents.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/estimate/model_layout.h"
#include "engine/zero/stage3_planner.h"

namespace sluice::estimate {

// One unit of the model in trace order, as the ZeRO engine sees it.
struct ZeroUnit {
  std::vector<int64_t> params;           // owned parameters' element counts, registry order
  int64_t numel = 0;                     // owned elements
  int64_t gathered = 0;                  // owned elements of non-persistent parameters (stage 3)
  std::vector<int64_t> gathered_params;  // their element counts
  int reads = -1;  // the unit whose storage it reads (itself, or the embeddings
                   // for a tied LM head)
};

// The layout's units with the blocks expanded, in trace order. Parameters of at most
// `persistence_threshold` elements are persistent (< 0: none).
std::vector<ZeroUnit> ExpandUnits(const std::vector<UnitLayout>& units,
                                  int64_t persistence_threshold);

// Elements of every rank's shard: the sum over parameters of ceil(numel / world).
int64_t ShardElements(const std::vector<ZeroUnit>& units, int world);

struct CoordinatorLimits {
  int world = 1;
  int64_t persistent = 0;  // elements of persistent parameters (always live)
  zero::Stage3Budgets budgets;
};

struct CoordinatorPeaks {
  // The most non-persistent parameter elements held gathered at once (fp32).
  int64_t gathered_elements = 0;
  // All-gather staging, in parameter elements: a unit's gather needs world x (its partitions + a
  // tag). The largest single gather (every gather stages through one buffer in turn).
  int64_t largest_gather_staging = 0;
};

// The planner over `units`, grouped as the coordinator groups them: one gather group per unit
// with gathered elements, in unit order; a unit needs the group of the unit it reads.
zero::Stage3Planner PlannerFor(const std::vector<ZeroUnit>& units, const CoordinatorLimits& limits);

// One planner action, as the coordinator carries it out.
struct CoordinatorEvent {
  int pass = 0;  // 0: the first (on demand, recording the trace), 1: a replay of it
  zero::Stage3ActionKind kind = zero::Stage3ActionKind::kGather;
  int unit = -1;  // whose parameters it gathers or releases
  bool operator==(const CoordinatorEvent&) const = default;
};

struct CoordinatorReplay {
  CoordinatorPeaks peaks;
  std::vector<CoordinatorEvent> events;  // both passes, in order
};

// Two training passes of the stage-3 coordinator (see above).
CoordinatorReplay ReplayCoordinator(const std::vector<ZeroUnit>& units,
                                    const CoordinatorLimits& limits);
// ReplayCoordinator's peaks.
CoordinatorPeaks SimulateCoordinator(const std::vector<ZeroUnit>& units,
                                     const CoordinatorLimits& limits);

struct ReducerPeaks {
  int64_t unit_gradient_elements = 0;  // full-size fp32 unit gradient buffers alive at once
  int64_t staging_elements = 0;        // fp32 reduce-scatter staging alive at once
};

// Stages 2 and 3: one backward's gradient buffers and reduce-scatter buckets on `world` ranks,
// each bucket's collective completing before the next bucket is issued (with overlap_comm the
// engine lets up to two be in flight, which holds more when the collectives fall behind).
ReducerPeaks SimulateReduceScatter(const std::vector<ZeroUnit>& units, int world,
                                   int64_t bucket_size);

// Stages 1 and 2: the all-gathers of updated parameters after a step, in buckets of world x
// the partitions they cover (partitions join while the total stays within `bucket_size`, a
// larger one alone).
struct AllGatherBuckets {
  int64_t largest_elements = 0;
  int64_t total_elements = 0;  // all buckets: world x the shard
};
AllGatherBuckets PublishBuckets(const std::vector<ZeroUnit>& units, int world, int64_t bucket_size);

}  // namespace sluice::estimate
