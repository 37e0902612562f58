// Stage 3's parameter policy, once: which gather groups are gathered, prefetched, kept and
// evicted at each access, decided from the module trace and the budgets alone (no comm, no
// device). The parameter coordinator (parameter_coordinator.h) carries the decisions out with
// all-gathers and frees; the memory estimator (engine/estimate/zero_simulation.h) replays the
// same planner over a training pass for the coordinator's peaks. One copy of the rules, so the
// estimate cannot drift from what the engine does.
//
// Groups. The caller numbers the gather groups (the coordinator: one per unit with
// non-persistent parameters, in unit order) and says which groups an access of each unit needs.
// `persistent` elements (stage3_param_persistence_threshold) count as always live.
//
// Passes. A pass without a trace (the first of its kind, while the coordinator records one)
// gathers on demand and releases after use. A pass with a trace replays it:
//   - prefetch: at the start of the pass and after each fetch, the groups of the next accesses
//     in trace order are gathered ahead while the numel gathered ahead is below
//     prefetch_bucket_size (0 disables);
//   - reuse: a released group is kept when the trace uses it again within max_reuse_distance
//     elements (the numel of the accesses in between);
//   - budget: max_live_parameters bounds the elements gathered or being gathered, persistent
//     ones included, at every moment. To make room, resident groups the current access does
//     not use are evicted, those used farthest ahead first (Belady): a fetch evicts what it
//     must; a prefetch only groups needed later than the one it brings, and stops otherwise.
// An access that is not the trace's next one leaves the trace: the rest of the pass is on
// demand. At the end of a pass nothing but the persistent elements stays live.
//
// An access that cannot fit the budget on its own (UnitOverBudget) is gathered anyway: the
// coordinator refuses such a budget when it is created, the estimator reports the overshoot.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/zero/module_trace.h"

namespace sluice::zero {

struct Stage3Budgets {
  int64_t prefetch_bucket_size = 0;  // zero_optimization.stage3_prefetch_bucket_size
  int64_t max_live_parameters = 0;   // zero_optimization.stage3_max_live_parameters
  int64_t max_reuse_distance = 0;    // zero_optimization.stage3_max_reuse_distance
};

struct Stage3Group {
  int unit = -1;      // whose parameters it holds (for describing actions)
  int64_t numel = 0;  // elements gathered
};

enum class Stage3ActionKind : uint8_t {
  kGather,    // the access needs it and it is not resident
  kPrefetch,  // gathered ahead of need, from the trace
  kEvict,     // released early to make room within max_live_parameters
  kRelease,   // released after use (not kept for reuse)
};
std::string_view Stage3ActionName(Stage3ActionKind kind);  // "gather", "prefetch", ...

struct Stage3Action {
  Stage3ActionKind kind = Stage3ActionKind::kGather;
  int group = -1;
  bool operator==(const Stage3Action&) const = default;
};

// What one call decided, to be carried out in order.
struct Stage3Step {
  std::vector<Stage3Action> actions;
  int reused = 0;           // groups the access needs that were still resident
  bool left_trace = false;  // this access left the pass's trace
};

class Stage3Planner {
 public:
  // `needs[u]`: the groups an access of unit u needs (indices into `groups`, no repeats).
  Stage3Planner(std::vector<Stage3Group> groups, std::vector<std::vector<int>> needs,
                int64_t persistent, const Stage3Budgets& budgets);

  // Elements an access of `unit` needs gathered at once (persistent ones not included).
  int64_t UnitNeed(int unit) const;
  // The first unit whose access alone exceeds max_live_parameters beside the persistent
  // elements, or -1.
  int UnitOverBudget() const;

  // `trace` (null: none yet, on demand) must stay alive and unchanged until EndPass.
  Stage3Step BeginPass(const ModuleTrace* trace);
  // Before the access's unit runs: its groups are resident once the actions are carried out.
  Stage3Step Fetch(const ModuleAccess& access);
  // After it ran: releases what is not kept for reuse.
  Stage3Step Release(const ModuleAccess& access);
  // Every resident group is released (kRelease, in group order).
  Stage3Step EndPass();

  const std::vector<Stage3Group>& groups() const { return groups_; }
  const std::vector<int>& needs(int unit) const { return needs_[static_cast<size_t>(unit)]; }
  bool resident(int group) const { return resident_[static_cast<size_t>(group)]; }
  int64_t persistent() const { return persistent_; }
  // Elements gathered or being gathered, persistent ones included; and their most since
  // construction.
  int64_t live() const { return live_; }
  int64_t peak_live() const { return peak_live_; }
  // Replaying a trace (not recording, not left it).
  bool replaying() const { return trace_ != nullptr; }
  // The index in the trace of the next expected access (where a pass left it, once it did).
  size_t position() const { return position_; }

 private:
  static constexpr size_t kNever = static_cast<size_t>(-1);

  void Issue(int group, Stage3ActionKind kind, Stage3Step& step);
  void Drop(int group, Stage3ActionKind kind, Stage3Step& step);
  // Index of the next trace access (from position_) that needs `group`; kNever if none.
  size_t NextUse(int group) const;
  bool KeepForReuse(int group) const;
  // Evicts resident groups not in use, farthest next use first, until `missing` more elements
  // fit the budget. With `needed_at` (a trace index) only groups used after it may go; false
  // when that is not enough. kNever: any such group may go.
  bool MakeRoom(int64_t missing, size_t needed_at, Stage3Step& step);
  void Prefetch(Stage3Step& step);

  std::vector<Stage3Group> groups_;
  std::vector<std::vector<int>> needs_;
  int64_t persistent_ = 0;
  Stage3Budgets budgets_;
  std::vector<bool> resident_;
  std::vector<bool> in_use_;
  int64_t live_ = 0;
  int64_t peak_live_ = 0;
  const ModuleTrace* trace_ = nullptr;  // while replaying
  size_t position_ = 0;
  bool in_pass_ = false;
};

}  // namespace sluice::zero
