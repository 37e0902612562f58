// Normalization over the feature dimension: LayerNorm (GPT-2's ln_1, ln_2, ln_f: weight and bias)
// and RMSNorm (Llama's input_layernorm, post_attention_layernorm, norm: weight only). Weights
// start at one, biases at zero.
#pragma once

#include <string>

#include "engine/model/module.h"

namespace sluice::model {

template <typename T>
class LayerNorm final : public Module<T> {
 public:
  LayerNorm(ModuleBuilder& builder, std::string name, int64_t dim, float eps);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

 private:
  int64_t dim_;
  float eps_;
  int weight_;
  int bias_;
};

template <typename T>
class RmsNorm final : public Module<T> {
 public:
  RmsNorm(ModuleBuilder& builder, std::string name, int64_t dim, float eps);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

 private:
  int64_t dim_;
  float eps_;
  int weight_;
};

extern template class LayerNorm<float>;
extern template class LayerNorm<double>;
extern template class RmsNorm<float>;
extern template class RmsNorm<double>;

}  // namespace sluice::model
