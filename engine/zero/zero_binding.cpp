#include "engine/zero/zero_binding.h"

#include "runtime/check.h"

namespace sluice::zero {

ZeroBinding::ZeroBinding(const model::ParameterRegistry& registry)
    : registry_(&registry),
      values_(registry.parameters().size(), nullptr),
      grads_(registry.parameters().size(), nullptr) {}

int ZeroBinding::Owner(int param) const {
  const model::ParameterInfo& info = registry_->parameter(param);
  return info.is_alias() ? info.tied_to : param;
}

const float* ZeroBinding::Value(int param) const {
  const float* values = values_[Owner(param)];
  SLUICE_CHECK(values != nullptr) << "parameter " << registry_->parameter(param).name
                                  << " is not gathered: its unit ran without being fetched";
  return values;
}

float* ZeroBinding::Grad(int param) const { return grads_[Owner(param)]; }

}  // namespace sluice::zero
