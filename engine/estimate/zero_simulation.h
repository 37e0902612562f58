// What the ZeRO engine (engine/zero) holds at its peaks, replayed from the model layout without
// running it: the stage-3 parameter coordinator's live set (prefetch by trace, reuse distance,
// live budget; parameter_coordinator.h) and the stage-2/3 gradient reducer's unit buffers and
// buckets (reduce_scatter_reducer.h), plus the shard and bucket sizes of the per-parameter shard
// layout (shard_layout.h: every parameter cut into ceil(numel / N) elements per rank).
//
// The replays follow the rules those headers document, over a training pass (the forward of
// every unit in order, then their backwards in reverse) after the first one (the coordinator
// records the trace on the first pass and prefetches from the second on).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/estimate/model_layout.h"

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
  int64_t prefetch_bucket_size = 0;
  int64_t max_live_parameters = 0;
  int64_t max_reuse_distance = 0;
};

struct CoordinatorPeaks {
  // The most non-persistent parameter elements held gathered at once (fp32).
  int64_t gathered_elements = 0;
  // All-gather staging, in parameter elements: a unit's gather needs world x (its partitions + a
  // tag). The largest single gather (every gather stages through one buffer in turn).
  int64_t largest_gather_staging = 0;
};

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
