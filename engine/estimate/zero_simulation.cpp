#include "engine/estimate/zero_simulation.h"

#include <algorithm>
#include <utility>

namespace sluice::estimate {
namespace {

// Forward of every unit in order, then the backwards in reverse (engine/model/model.cpp).
zero::ModuleTrace TrainingTrace(size_t units) {
  zero::ModuleTrace trace;
  for (size_t u = 0; u < units; ++u) trace.Append({static_cast<int>(u), zero::Phase::kForward});
  for (size_t u = units; u-- > 0;) trace.Append({static_cast<int>(u), zero::Phase::kBackward});
  return trace;
}

// A unit's all-gather stages world x (its partitions + a tag) elements.
int64_t GatherStaging(const ZeroUnit& unit, int world) {
  int64_t partitions = 0;
  for (int64_t numel : unit.gathered_params) partitions += (numel + world - 1) / world;
  return world * (partitions + 1);
}

}  // namespace

std::vector<ZeroUnit> ExpandUnits(const std::vector<UnitLayout>& layout,
                                  int64_t persistence_threshold) {
  std::vector<ZeroUnit> units;
  int embeddings = -1;
  for (const UnitLayout& kind : layout) {
    for (int64_t i = 0; i < kind.count; ++i) {
      ZeroUnit unit;
      unit.params = kind.param_numels;
      for (int64_t numel : kind.param_numels) {
        unit.numel += numel;
        if (numel > persistence_threshold) {
          unit.gathered += numel;
          unit.gathered_params.push_back(numel);
        }
      }
      const int index = static_cast<int>(units.size());
      if (kind.name == "embeddings") embeddings = index;
      // A unit that owns nothing but reads (the tied LM head) reads the token table.
      unit.reads = unit.numel == 0 && kind.read_elements > 0 ? embeddings : index;
      units.push_back(std::move(unit));
    }
  }
  return units;
}

int64_t ShardElements(const std::vector<ZeroUnit>& units, int world) {
  int64_t shard = 0;
  for (const ZeroUnit& unit : units) {
    for (int64_t numel : unit.params) shard += (numel + world - 1) / world;
  }
  return shard;
}

zero::Stage3Planner PlannerFor(const std::vector<ZeroUnit>& units,
                               const CoordinatorLimits& limits) {
  std::vector<zero::Stage3Group> groups;
  std::vector<int> group_of_unit(units.size(), -1);
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].gathered == 0) continue;
    group_of_unit[u] = static_cast<int>(groups.size());
    groups.push_back({static_cast<int>(u), units[u].gathered});
  }
  std::vector<std::vector<int>> needs(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const int owner = units[u].reads;
    if (owner >= 0 && group_of_unit[static_cast<size_t>(owner)] >= 0) {
      needs[u].push_back(group_of_unit[static_cast<size_t>(owner)]);
    }
  }
  return zero::Stage3Planner(std::move(groups), std::move(needs), limits.persistent,
                             limits.budgets);
}

CoordinatorReplay ReplayCoordinator(const std::vector<ZeroUnit>& units,
                                    const CoordinatorLimits& limits) {
  zero::Stage3Planner planner = PlannerFor(units, limits);
  const zero::ModuleTrace trace = TrainingTrace(units.size());
  CoordinatorReplay replay;
  int pass = 0;
  const auto record = [&](const zero::Stage3Step& step) {
    for (const zero::Stage3Action& action : step.actions) {
      const int unit = planner.groups()[static_cast<size_t>(action.group)].unit;
      replay.events.push_back({pass, action.kind, unit});
      if (action.kind == zero::Stage3ActionKind::kGather ||
          action.kind == zero::Stage3ActionKind::kPrefetch) {
        replay.peaks.largest_gather_staging =
            std::max(replay.peaks.largest_gather_staging,
                     GatherStaging(units[static_cast<size_t>(unit)], limits.world));
      }
    }
  };
  for (pass = 0; pass < 2; ++pass) {
    record(planner.BeginPass(pass == 0 ? nullptr : &trace));
    for (const zero::ModuleAccess& access : trace.accesses()) {
      record(planner.Fetch(access));
      record(planner.Release(access));
    }
    record(planner.EndPass());
  }
  replay.peaks.gathered_elements = planner.peak_live() - limits.persistent;
  return replay;
}

CoordinatorPeaks SimulateCoordinator(const std::vector<ZeroUnit>& units,
                                     const CoordinatorLimits& limits) {
  return ReplayCoordinator(units, limits).peaks;
}

ReducerPeaks SimulateReduceScatter(const std::vector<ZeroUnit>& units, int world,
                                   int64_t bucket_size) {
  ReducerPeaks peaks;
  std::vector<bool> allocated(units.size(), false);
  int64_t live = 0;          // unit gradient buffers
  int64_t open_numel = 0;    // the open bucket
  int64_t open_piece = 0;    // its partitions: elements per rank
  int64_t open_release = 0;  // unit buffers freed once it went out
  const auto flush = [&] {
    peaks.staging_elements = std::max(peaks.staging_elements, open_piece * world);
    live -= open_release;
    open_numel = open_piece = open_release = 0;
  };
  for (size_t u = units.size(); u-- > 0;) {
    const int owner = units[u].reads;  // the storage its backward writes
    if (owner >= 0 && !allocated[owner] && units[owner].numel > 0) {
      allocated[owner] = true;
      live += units[owner].numel;
      peaks.unit_gradient_elements = std::max(peaks.unit_gradient_elements, live);
    }
    if (!allocated[u] || units[u].numel == 0) continue;
    for (auto it = units[u].params.rbegin(); it != units[u].params.rend(); ++it) {
      if (open_numel > 0 && open_numel + *it > bucket_size) flush();
      open_numel += *it;
      open_piece += (*it + world - 1) / world;
    }
    open_release += units[u].numel;
  }
  flush();
  return peaks;
}

AllGatherBuckets PublishBuckets(const std::vector<ZeroUnit>& units, int world,
                                int64_t bucket_size) {
  std::vector<int64_t> partitions;
  for (const ZeroUnit& unit : units) {
    for (int64_t numel : unit.params) partitions.push_back((numel + world - 1) / world);
  }
  AllGatherBuckets buckets;
  for (size_t first = 0; first < partitions.size();) {
    size_t last = first;
    int64_t piece = 0;
    while (last < partitions.size() &&
           (last == first || (piece + partitions[last]) * world <= bucket_size)) {
      piece += partitions[last];
      ++last;
    }
    buckets.largest_elements = std::max(buckets.largest_elements, piece * world);
    buckets.total_elements += piece * world;
    first = last;
  }
  return buckets;
}

}  // namespace sluice::estimate
