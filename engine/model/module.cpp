#include "engine/model/module.h"

#include <utility>

#include "runtime/check.h"

namespace sluice::model {

template <typename T>
Module<T>::Module(ModuleBuilder& builder, std::string name)
    : name_(std::move(name)), id_(builder.NextModuleId()) {}

template <typename T>
int Module<T>::AddParameter(ModuleBuilder& builder, std::string_view local_name, Shape shape,
                            InitKind init) {
  std::string full = name_;
  full += '.';
  full += local_name;
  const int index = builder.registry().Add(std::move(full), shape, init);
  parameters_.push_back(index);
  return index;
}

template <typename T>
void Module<T>::ReplaceChild(const Module<T>* old, Module<T>* now) {
  for (Module<T>*& child : children_) {
    if (child == old) {
      child = now;
      return;
    }
  }
  SLUICE_CHECK(false) << name_ << " has no child " << old->name();
}

template <typename T>
std::vector<int> Module<T>::AllParameters() const {
  std::vector<int> all(parameters_.begin(), parameters_.end());
  for (const Module<T>* child : children_) {
    const std::vector<int> below = child->AllParameters();
    all.insert(all.end(), below.begin(), below.end());
  }
  return all;
}

template <typename T>
std::vector<int> Module<T>::AllModuleIds() const {
  std::vector<int> ids = {id_};
  for (const Module<T>* child : children_) {
    const std::vector<int> below = child->AllModuleIds();
    ids.insert(ids.end(), below.begin(), below.end());
  }
  return ids;
}

template class Module<float>;
template class Module<double>;

}  // namespace sluice::model
