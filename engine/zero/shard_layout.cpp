#include "engine/zero/shard_layout.h"

#include <algorithm>

#include "runtime/check.h"

namespace sluice::zero {

ShardLayout ShardLayout::Build(const model::ParameterRegistry& registry, int world, int rank,
                               int64_t persistence_threshold) {
  SLUICE_CHECK(world >= 1 && rank >= 0 && rank < world) << "rank " << rank << " of " << world;
  ShardLayout layout;
  layout.world_ = world;
  layout.rank_ = rank;
  layout.total_elements_ = registry.total_elements();
  const auto& params = registry.parameters();
  layout.partition_of_param_.assign(params.size(), -1);
  layout.alias_target_.resize(params.size());
  layout.units_.resize(registry.units().size());

  std::vector<int> order;  // registry indices: non-persistent first, then persistent
  std::vector<int> persistent_params;
  for (size_t p = 0; p < params.size(); ++p) {
    const model::ParameterInfo& info = params[p];
    layout.alias_target_[p] = info.is_alias() ? info.tied_to : static_cast<int>(p);
    if (info.is_alias()) continue;
    const bool persistent = persistence_threshold >= 0 && info.numel <= persistence_threshold;
    (persistent ? persistent_params : order).push_back(static_cast<int>(p));
  }
  const size_t non_persistent = order.size();
  order.insert(order.end(), persistent_params.begin(), persistent_params.end());

  int64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const model::ParameterInfo& info = params[static_cast<size_t>(order[i])];
    PartitionInfo part;
    part.param = order[i];
    part.unit = info.unit;
    part.numel = info.numel;
    part.full_offset = info.offset;
    part.partition = (info.numel + world - 1) / world;
    part.shard_offset = offset;
    part.persistent = i >= non_persistent;
    offset += part.partition;
    const int index = static_cast<int>(layout.partitions_.size());
    layout.partition_of_param_[static_cast<size_t>(part.param)] = index;
    UnitShards& unit = layout.units_[static_cast<size_t>(info.unit)];
    if (part.persistent) {
      if (layout.persistent_.empty()) layout.persistent_offset_ = part.shard_offset;
      layout.persistent_.push_back(index);
      layout.persistent_elements_ += part.partition;
      layout.persistent_numel_ += part.numel;
    } else {
      if (unit.gathered.empty()) unit.gather_offset = part.shard_offset;
      SLUICE_CHECK_EQ(unit.gather_offset + unit.gather_elements, part.shard_offset)
          << "a unit's parameters are not consecutive in the registry";
      unit.gathered.push_back(index);
      unit.gather_elements += part.partition;
      unit.gathered_numel += part.numel;
    }
    layout.partitions_.push_back(part);
  }
  layout.shard_elements_ = offset;
  for (size_t p = 0; p < params.size(); ++p) {
    if (params[p].is_alias()) continue;
    layout.units_[static_cast<size_t>(params[p].unit)].all.push_back(layout.partition_of_param_[p]);
  }
  return layout;
}

int64_t ShardLayout::padding_elements() const {
  int64_t padding = 0;
  for (const PartitionInfo& p : partitions_) {
    padding += p.partition - static_cast<int64_t>(Owned(p).count);
  }
  return padding;
}

const PartitionInfo& ShardLayout::PartitionOf(int param) const {
  SLUICE_CHECK(param >= 0 && static_cast<size_t>(param) < alias_target_.size())
      << "parameter " << param;
  const int index = partition_of_param_[static_cast<size_t>(alias_target_[param])];
  SLUICE_CHECK_GE(index, 0) << "parameter " << param << " has no partition";
  return partitions_[static_cast<size_t>(index)];
}

std::vector<std::vector<int>> StorageUnitsReadBy(const model::ParameterRegistry& registry) {
  const auto& units = registry.units();
  std::vector<std::vector<int>> reads(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<int>& owners = reads[u];
    for (int p : units[u].params) {
      const model::ParameterInfo& info = registry.parameter(p);
      const int owner = info.is_alias() ? registry.parameter(info.tied_to).unit : info.unit;
      SLUICE_CHECK_LE(owner, static_cast<int>(u))
          << "unit " << units[u].name << " reads " << info.name << " of a later unit";
      if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
    }
    std::sort(owners.begin(), owners.end());
  }
  return reads;
}

}  // namespace sluice::zero
