#include "engine/estimate/zero_simulation.h"

#include <algorithm>
#include <limits>

namespace sluice::estimate {
namespace {

struct Access {
  int unit = 0;
};

// Forward of every unit in order, then the backwards in reverse.
std::vector<Access> TrainingTrace(size_t units) {
  std::vector<Access> trace;
  for (size_t u = 0; u < units; ++u) trace.push_back({static_cast<int>(u)});
  for (size_t u = units; u-- > 0;) trace.push_back({static_cast<int>(u)});
  return trace;
}

// The coordinator's groups: one per unit with gathered elements.
class CoordinatorReplay {
 public:
  CoordinatorReplay(const std::vector<ZeroUnit>& units, const CoordinatorLimits& limits)
      : units_(units), limits_(limits), trace_(TrainingTrace(units.size())) {
    resident_.assign(units.size(), false);
    in_use_.assign(units.size(), false);
    live_ = limits.persistent;
  }

  CoordinatorPeaks Run() {
    position_ = 0;
    Prefetch();
    for (const Access& access : trace_) {
      ++position_;
      const int group = Need(access.unit);
      if (group >= 0) {
        in_use_[group] = true;
        if (!resident_[group]) {
          MakeRoom(units_[group].gathered);
          Issue(group);
        }
      }
      Prefetch();
      if (group >= 0) {
        in_use_[group] = false;
        if (!KeepForReuse(group)) Release(group);
      }
    }
    peaks_.gathered_elements = peak_ - limits_.persistent;
    return peaks_;
  }

 private:
  static constexpr size_t kNever = std::numeric_limits<size_t>::max();

  int Need(int unit) const {
    const int owner = units_[unit].reads;
    return owner >= 0 && units_[owner].gathered > 0 ? owner : -1;
  }
  void Issue(int group) {
    resident_[group] = true;
    live_ += units_[group].gathered;
    peak_ = std::max(peak_, live_);
    int64_t partitions = 0;
    for (int64_t numel : units_[group].gathered_params) {
      partitions += (numel + limits_.world - 1) / limits_.world;
    }
    const int64_t staging = limits_.world * (partitions + 1);
    peaks_.largest_gather_staging = std::max(peaks_.largest_gather_staging, staging);
  }
  void Release(int group) {
    if (!resident_[group]) return;
    resident_[group] = false;
    live_ -= units_[group].gathered;
  }
  size_t NextUse(int group) const {
    for (size_t j = position_; j < trace_.size(); ++j) {
      if (Need(trace_[j].unit) == group) return j;
    }
    return kNever;
  }
  bool KeepForReuse(int group) const {
    int64_t distance = 0;
    for (size_t j = position_; j < trace_.size(); ++j) {
      const int need = Need(trace_[j].unit);
      if (need == group) return distance < limits_.max_reuse_distance;
      if (need >= 0) distance += units_[need].gathered;
    }
    return false;
  }
  void MakeRoom(int64_t missing) {
    while (live_ + missing > limits_.max_live_parameters) {
      int victim = -1;
      size_t victim_use = 0;
      for (size_t g = 0; g < units_.size(); ++g) {
        if (!resident_[g] || in_use_[g]) continue;
        const size_t use = NextUse(static_cast<int>(g));
        if (victim < 0 || use > victim_use) {
          victim = static_cast<int>(g);
          victim_use = use;
        }
      }
      if (victim < 0) return;  // the engine refuses such a budget at creation
      Release(victim);
    }
  }
  void Prefetch() {
    if (limits_.prefetch_bucket_size == 0) return;
    std::vector<bool> visited(units_.size(), false);
    int64_t ahead = 0;
    for (size_t j = position_; j < trace_.size(); ++j) {
      const int group = Need(trace_[j].unit);
      if (group < 0 || visited[group] || in_use_[group]) continue;
      visited[group] = true;
      if (resident_[group]) {
        ahead += units_[group].gathered;
        continue;
      }
      if (ahead >= limits_.prefetch_bucket_size) return;
      if (live_ + units_[group].gathered > limits_.max_live_parameters) return;
      Issue(group);
      ahead += units_[group].gathered;
    }
  }

  const std::vector<ZeroUnit>& units_;
  CoordinatorLimits limits_;
  std::vector<Access> trace_;
  std::vector<bool> resident_;
  std::vector<bool> in_use_;
  size_t position_ = 0;
  int64_t live_ = 0;
  int64_t peak_ = 0;
  CoordinatorPeaks peaks_;
};

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

CoordinatorPeaks SimulateCoordinator(const std::vector<ZeroUnit>& units,
                                     const CoordinatorLimits& limits) {
  return CoordinatorReplay(units, limits).Run();
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
