// A pre-norm decoder block: h = x + attn(norm_1(x)); y = h + mlp(norm_2(h)).
//   GPT-2 names: ln_1, attn (c_attn, c_proj), ln_2, mlp (c_fc, c_proj); LayerNorm, GELU, biases.
//   Llama names: input_layernorm, self_attn (q/k/v/o_proj, RoPE), post_attention_layernorm,
//   mlp (gate/up/down_proj); RMSNorm, SwiGLU, no biases, grouped-query attention.
//
// Activation checkpointing: the block's forward runs in a Child() context that is dropped at the
// end, keeping only its input (where: checkpointed_inputs.h) and a copy of its output in the
// caller's context; its backward re-runs the same forward in a fresh child context and
// back-propagates through it. The recomputation calls the same ops on the same inputs in the same
// order, so gradients are bitwise identical to the run without checkpointing. Block i is
// checkpointed when i < CheckpointedBlocks(options).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/model/attention.h"
#include "engine/model/checkpointed_inputs.h"
#include "engine/model/mlp.h"
#include "engine/model/model_options.h"

namespace sluice::model {

template <typename T>
class DecoderBlock final : public Module<T> {
 public:
  // `name` is the block's prefix: "transformer.h.3" or "model.layers.3". Uses the family,
  // widths, heads, norm_eps, rope_theta and activation checkpointing settings of `options`.
  // `index` is the block's position in the model and `inputs` the model's store of checkpointed
  // inputs (not owned; it must outlive the block); without one the block is a model of one block
  // and keeps a store of its own.
  DecoderBlock(ModuleBuilder& builder, std::string name, const ModelOptions& options,
               int64_t index = 0, CheckpointedInputs<T>* inputs = nullptr);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

  bool checkpointed() const { return checkpoint_; }

  // Build time, for a parallelization plan (engine/parallel/tensor_plan.h): the attention and
  // the MLP are replaced by what `wrap` makes of each (it takes ownership); the block runs them
  // as before, unaware of what the wrapper adds around them.
  using Wrapper = std::function<std::unique_ptr<Module<T>>(std::unique_ptr<Module<T>>)>;
  void WrapSublayers(const Wrapper& wrap);

 private:
  Result<Act<T>> InnerForward(ForwardContext<T>& work, Act<T> x);
  // Back-propagates through the activations saved in `work`; dx is allocated in `out`.
  Result<Act<T>> InnerBackward(ForwardContext<T>& work, ForwardContext<T>& out, Act<T> dy);

  int64_t d_model_;
  int64_t index_;
  bool checkpoint_;
  std::unique_ptr<CheckpointedInputs<T>> own_inputs_;  // a block built on its own
  CheckpointedInputs<T>* inputs_ = nullptr;
  std::unique_ptr<Module<T>> norm_1_;
  std::unique_ptr<Module<T>> attn_;
  std::unique_ptr<Module<T>> norm_2_;
  std::unique_ptr<Module<T>> mlp_;
};

extern template class DecoderBlock<float>;
extern template class DecoderBlock<double>;

}  // namespace sluice::model
