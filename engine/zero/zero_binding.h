// Where the model finds each parameter's fp32 values and accumulates its gradient during a ZeRO
// pass: the replicated flat buffers (stages 0-2), a unit's gathered buffer (stage 3, set by the
// parameter coordinator while the unit is fetched), a unit's full-size gradient buffer (stages 2
// and 3, set by the gradient reducer while the unit's backward runs). Aliases (a tied LM head)
// resolve to their target, so both users of a tied weight read and accumulate the same storage.
#pragma once

#include <vector>

#include "engine/model/forward_context.h"
#include "engine/model/parameter_registry.h"

namespace sluice::zero {

class ZeroBinding final : public model::ParameterBinding<float> {
 public:
  explicit ZeroBinding(const model::ParameterRegistry& registry);

  // CHECK-fails when the parameter is not materialized: a unit ran without being fetched.
  const float* Value(int param) const override;
  // Null when no gradient buffer is bound (evaluation, or a unit outside its backward).
  float* Grad(int param) const override;

  // `param` must not be an alias; null unbinds.
  void SetValue(int param, const float* values) { values_[Owner(param)] = values; }
  void SetGrad(int param, float* grads) { grads_[Owner(param)] = grads; }
  bool HasValue(int param) const { return values_[Owner(param)] != nullptr; }

 private:
  int Owner(int param) const;

  const model::ParameterRegistry* registry_;
  std::vector<const float*> values_;
  std::vector<float*> grads_;
};

}  // namespace sluice::zero
