#include "engine/zero/stage3_planner.h"

#include <algorithm>
#include <utility>

#include "runtime/check.h"

namespace sluice::zero {

std::string_view Stage3ActionName(Stage3ActionKind kind) {
  switch (kind) {
    case Stage3ActionKind::kGather:
      return "gather";
    case Stage3ActionKind::kPrefetch:
      return "prefetch";
    case Stage3ActionKind::kEvict:
      return "evict";
    case Stage3ActionKind::kRelease:
      return "release";
  }
  return "unknown";
}

Stage3Planner::Stage3Planner(std::vector<Stage3Group> groups, std::vector<std::vector<int>> needs,
                             int64_t persistent, const Stage3Budgets& budgets)
    : groups_(std::move(groups)),
      needs_(std::move(needs)),
      persistent_(persistent),
      budgets_(budgets),
      resident_(groups_.size(), false),
      in_use_(groups_.size(), false),
      live_(persistent),
      peak_live_(persistent) {
  for (const std::vector<int>& unit_needs : needs_) {
    for (int group : unit_needs) {
      SLUICE_CHECK(group >= 0 && static_cast<size_t>(group) < groups_.size())
          << "group " << group << " of " << groups_.size();
    }
  }
}

int64_t Stage3Planner::UnitNeed(int unit) const {
  int64_t need = 0;
  for (int g : needs_[static_cast<size_t>(unit)]) need += groups_[static_cast<size_t>(g)].numel;
  return need;
}

int Stage3Planner::UnitOverBudget() const {
  for (size_t u = 0; u < needs_.size(); ++u) {
    if (persistent_ + UnitNeed(static_cast<int>(u)) > budgets_.max_live_parameters) {
      return static_cast<int>(u);
    }
  }
  return -1;
}

void Stage3Planner::Issue(int group, Stage3ActionKind kind, Stage3Step& step) {
  SLUICE_CHECK(!resident_[static_cast<size_t>(group)]);
  resident_[static_cast<size_t>(group)] = true;
  live_ += groups_[static_cast<size_t>(group)].numel;
  peak_live_ = std::max(peak_live_, live_);
  step.actions.push_back({kind, group});
}

void Stage3Planner::Drop(int group, Stage3ActionKind kind, Stage3Step& step) {
  if (!resident_[static_cast<size_t>(group)]) return;
  resident_[static_cast<size_t>(group)] = false;
  live_ -= groups_[static_cast<size_t>(group)].numel;
  step.actions.push_back({kind, group});
}

size_t Stage3Planner::NextUse(int group) const {
  if (trace_ == nullptr) return kNever;
  for (size_t j = position_; j < trace_->size(); ++j) {
    const std::vector<int>& needs = needs_[static_cast<size_t>((*trace_)[j].unit)];
    if (std::find(needs.begin(), needs.end(), group) != needs.end()) return j;
  }
  return kNever;
}

bool Stage3Planner::KeepForReuse(int group) const {
  if (trace_ == nullptr) return false;
  int64_t distance = 0;
  for (size_t j = position_; j < trace_->size(); ++j) {
    const int unit = (*trace_)[j].unit;
    const std::vector<int>& needs = needs_[static_cast<size_t>(unit)];
    if (std::find(needs.begin(), needs.end(), group) != needs.end()) {
      return distance < budgets_.max_reuse_distance;
    }
    distance += UnitNeed(unit);
  }
  return false;
}

bool Stage3Planner::MakeRoom(int64_t missing, size_t needed_at, Stage3Step& step) {
  while (live_ + missing > budgets_.max_live_parameters) {
    int victim = -1;
    size_t victim_use = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (!resident_[g] || in_use_[g]) continue;
      const size_t use = NextUse(static_cast<int>(g));
      if (victim < 0 || use > victim_use) {
        victim = static_cast<int>(g);
        victim_use = use;
      }
    }
    if (victim < 0 || (needed_at != kNever && victim_use <= needed_at)) return false;
    Drop(victim, Stage3ActionKind::kEvict, step);
  }
  return true;
}

void Stage3Planner::Prefetch(Stage3Step& step) {
  if (trace_ == nullptr || budgets_.prefetch_bucket_size == 0) return;
  std::vector<bool> visited(groups_.size(), false);
  int64_t ahead = 0;
  for (size_t j = position_; j < trace_->size(); ++j) {
    for (int group : needs_[static_cast<size_t>((*trace_)[j].unit)]) {
      const size_t g = static_cast<size_t>(group);
      if (visited[g] || in_use_[g]) continue;
      visited[g] = true;
      if (resident_[g]) {
        ahead += groups_[g].numel;
        continue;
      }
      if (ahead >= budgets_.prefetch_bucket_size) return;
      // Room only at the expense of groups needed later than this one.
      if (!MakeRoom(groups_[g].numel, j, step)) return;
      Issue(group, Stage3ActionKind::kPrefetch, step);
      ahead += groups_[g].numel;
    }
  }
}

Stage3Step Stage3Planner::BeginPass(const ModuleTrace* trace) {
  SLUICE_CHECK(!in_pass_) << "BeginPass without EndPass";
  in_pass_ = true;
  trace_ = trace;
  position_ = 0;
  Stage3Step step;
  Prefetch(step);
  return step;
}

Stage3Step Stage3Planner::Fetch(const ModuleAccess& access) {
  SLUICE_CHECK(in_pass_) << "Fetch outside a pass";
  SLUICE_CHECK(access.unit >= 0 && static_cast<size_t>(access.unit) < needs_.size())
      << "unit " << access.unit;
  Stage3Step step;
  if (trace_ != nullptr) {
    if (position_ < trace_->size() && (*trace_)[position_] == access) {
      ++position_;
    } else {
      trace_ = nullptr;
      step.left_trace = true;
    }
  }
  const std::vector<int>& needs = needs_[static_cast<size_t>(access.unit)];
  int64_t missing = 0;
  for (int group : needs) {
    const size_t g = static_cast<size_t>(group);
    in_use_[g] = true;
    if (resident_[g]) {
      ++step.reused;
    } else {
      missing += groups_[g].numel;
    }
  }
  // False only for an access over the budget on its own (UnitOverBudget): gathered anyway.
  (void)MakeRoom(missing, kNever, step);
  for (int group : needs) {
    if (!resident_[static_cast<size_t>(group)]) Issue(group, Stage3ActionKind::kGather, step);
  }
  Prefetch(step);
  return step;
}

Stage3Step Stage3Planner::Release(const ModuleAccess& access) {
  SLUICE_CHECK(in_pass_) << "Release outside a pass";
  const std::vector<int>& needs = needs_[static_cast<size_t>(access.unit)];
  for (int group : needs) in_use_[static_cast<size_t>(group)] = false;
  Stage3Step step;
  for (int group : needs) {
    if (!KeepForReuse(group)) Drop(group, Stage3ActionKind::kRelease, step);
  }
  return step;
}

Stage3Step Stage3Planner::EndPass() {
  SLUICE_CHECK(in_pass_) << "EndPass without BeginPass";
  in_pass_ = false;
  trace_ = nullptr;
  Stage3Step step;
  for (size_t g = 0; g < groups_.size(); ++g) {
    in_use_[g] = false;
    Drop(static_cast<int>(g), Stage3ActionKind::kRelease, step);
  }
  return step;
}

}  // namespace sluice::zero
