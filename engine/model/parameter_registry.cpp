#include "engine/model/parameter_registry.h"

#include <utility>

#include "runtime/check.h"

namespace sluice::model {

int ParameterRegistry::BeginUnit(std::string name) {
  UnitInfo unit;
  unit.name = std::move(name);
  unit.offset = total_elements_;
  units_.push_back(std::move(unit));
  return static_cast<int>(units_.size()) - 1;
}

int ParameterRegistry::Add(std::string name, Shape shape, InitKind init) {
  SLUICE_CHECK(!units_.empty()) << "parameter " << name << " added before any unit";
  SLUICE_CHECK(!Find(name).has_value()) << "duplicate parameter name " << name;
  ParameterInfo info;
  info.sharding = sharding_rule_ ? sharding_rule_(name, shape) : parallel::WholeTensor(shape);
  SLUICE_CHECK(info.sharding.global_shape == shape)
      << name << ": the sharding rule answered for " << info.sharding.global_shape.ToString()
      << ", not " << shape.ToString();
  info.name = std::move(name);
  info.shape = info.sharding.LocalShape();
  info.numel = info.shape.numel();
  info.dtype = dtype_;
  info.offset = total_elements_;
  info.unit = static_cast<int>(units_.size()) - 1;
  info.init = init;
  total_elements_ += info.numel;
  const int index = static_cast<int>(parameters_.size());
  parameters_.push_back(std::move(info));
  units_.back().numel += parameters_.back().numel;
  units_.back().params.push_back(index);
  return index;
}

int ParameterRegistry::AddMirror(std::string name, Shape shape, InitKind init) {
  const int index = Add(std::move(name), std::move(shape), init);
  parameters_[static_cast<size_t>(index)].mirror = true;
  return index;
}

int ParameterRegistry::AddAlias(std::string name, int target) {
  SLUICE_CHECK(!units_.empty()) << "alias " << name << " added before any unit";
  SLUICE_CHECK(!Find(name).has_value()) << "duplicate parameter name " << name;
  const ParameterInfo& owner = parameter(target);
  SLUICE_CHECK(!owner.is_alias()) << name << ": an alias of the alias " << owner.name;
  ParameterInfo info = owner;
  info.name = std::move(name);
  info.unit = static_cast<int>(units_.size()) - 1;
  info.tied_to = target;
  const int index = static_cast<int>(parameters_.size());
  parameters_.push_back(std::move(info));
  units_.back().params.push_back(index);
  return index;
}

const ParameterInfo& ParameterRegistry::parameter(int index) const {
  SLUICE_CHECK(index >= 0 && index < static_cast<int>(parameters_.size()))
      << "parameter index " << index << " of " << parameters_.size();
  return parameters_[index];
}

ParameterRegistry ParameterRegistry::GlobalRegistry() const {
  ParameterRegistry global(dtype_);
  for (const UnitInfo& unit : units_) {
    global.BeginUnit(unit.name);
    for (const int p : unit.params) {
      const ParameterInfo& info = parameters_[static_cast<size_t>(p)];
      const int index = info.is_alias() ? global.AddAlias(info.name, info.tied_to)
                        : info.mirror
                            ? global.AddMirror(info.name, info.sharding.global_shape, info.init)
                            : global.Add(info.name, info.sharding.global_shape, info.init);
      SLUICE_CHECK_EQ(index, p) << info.name << ": registered out of unit order";
    }
  }
  return global;
}

std::optional<int> ParameterRegistry::Find(std::string_view name) const {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (parameters_[i].name == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

}  // namespace sluice::model
