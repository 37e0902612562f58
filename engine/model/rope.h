// Rotary position embedding (Llama's q and k, Hugging Face's rotate_half convention) as a module
// without parameters over [rows, heads * head_dim]; token t of each sequence is at position t.
#pragma once

#include <string>

#include "engine/model/module.h"

namespace sluice::model {

template <typename T>
class Rope final : public Module<T> {
 public:
  Rope(ModuleBuilder& builder, std::string name, int64_t heads, int64_t head_dim, double theta);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

 private:
  int64_t heads_;
  int64_t head_dim_;
  float theta_;
};

extern template class Rope<float>;
extern template class Rope<double>;

}  // namespace sluice::model
