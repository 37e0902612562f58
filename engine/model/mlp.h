// The feed-forward block.
//   GELU (GPT-2): y = c_proj(gelu(c_fc(x))), c_fc [d_ff, d], c_proj [d, d_ff], with biases.
//   SwiGLU (Llama): y = down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
// The output projection is initialized as a residual projection (init.h). The hidden width is
// that of the projections' weights: d_ff, or a tensor rank's share of it (parameter_registry.h).
#pragma once

#include <memory>
#include <string>

#include "engine/model/linear.h"

namespace sluice::model {

struct MlpOptions {
  int64_t d_model = 0;
  int64_t d_ff = 0;
  bool swiglu = false;  // false: GELU with GPT-2 names; true: SwiGLU with Llama names
  bool bias = false;
};

template <typename T>
class Mlp final : public Module<T> {
 public:
  Mlp(ModuleBuilder& builder, std::string name, const MlpOptions& options);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

 private:
  MlpOptions options_;
  int64_t ff_ = 0;                  // the hidden width this module computes
  std::unique_ptr<Linear<T>> in_;   // c_fc, or gate_proj
  std::unique_ptr<Linear<T>> up_;   // up_proj (SwiGLU only)
  std::unique_ptr<Linear<T>> out_;  // c_proj, or down_proj
};

extern template class Mlp<float>;
extern template class Mlp<double>;

}  // namespace sluice::model
