#include "engine/model/decoder_block.h"

#include <utility>

#include "engine/model/norm.h"

namespace sluice::model {

template <typename T>
DecoderBlock<T>::DecoderBlock(ModuleBuilder& builder, std::string name, const ModelOptions& options,
                              int64_t index, CheckpointedInputs<T>* inputs)
    : Module<T>(builder, std::move(name)),
      d_model_(options.d_model),
      index_(index),
      checkpoint_(index < CheckpointedBlocks(options)) {
  if (checkpoint_) {
    if (inputs == nullptr) {
      own_inputs_ = std::make_unique<CheckpointedInputs<T>>(builder, options);
      inputs = own_inputs_.get();
    }
    SLUICE_CHECK(inputs->holds(index_)) << this->name();
    inputs_ = inputs;
  }
  const std::string& prefix = this->name();
  const bool gpt2 = options.family == Family::kGpt2;
  const auto make_norm = [&](std::string norm_name) -> std::unique_ptr<Module<T>> {
    if (gpt2) {
      return std::make_unique<LayerNorm<T>>(builder, std::move(norm_name), options.d_model,
                                            options.norm_eps);
    }
    return std::make_unique<RmsNorm<T>>(builder, std::move(norm_name), options.d_model,
                                        options.norm_eps);
  };
  AttentionOptions attention;
  attention.d_model = options.d_model;
  attention.n_head = options.n_head;
  attention.n_kv_head = options.n_kv_head;
  attention.fused_qkv = gpt2;
  attention.bias = gpt2;
  attention.rope = !gpt2;
  attention.rope_theta = options.rope_theta;
  MlpOptions mlp;
  mlp.d_model = options.d_model;
  mlp.d_ff = options.d_ff;
  mlp.swiglu = !gpt2;
  mlp.bias = gpt2;

  norm_1_ = make_norm(prefix + (gpt2 ? ".ln_1" : ".input_layernorm"));
  attn_ = std::make_unique<CausalSelfAttention<T>>(
      builder, prefix + (gpt2 ? ".attn" : ".self_attn"), attention);
  norm_2_ = make_norm(prefix + (gpt2 ? ".ln_2" : ".post_attention_layernorm"));
  mlp_ = std::make_unique<Mlp<T>>(builder, prefix + ".mlp", mlp);
  this->AddChild(norm_1_.get());
  this->AddChild(attn_.get());
  this->AddChild(norm_2_.get());
  this->AddChild(mlp_.get());
}

template <typename T>
void DecoderBlock<T>::WrapSublayers(const Wrapper& wrap) {
  for (std::unique_ptr<Module<T>>* sublayer : {&attn_, &mlp_}) {
    const Module<T>* old = sublayer->get();
    *sublayer = wrap(std::move(*sublayer));
    SLUICE_CHECK(*sublayer != nullptr) << this->name() << ": a wrapper returned nothing";
    this->ReplaceChild(old, sublayer->get());
  }
}

template <typename T>
Result<Act<T>> DecoderBlock<T>::InnerForward(ForwardContext<T>& work, Act<T> x) {
  const int64_t n = x.numel();
  SLUICE_ASSIGN_OR_RETURN(Act<T> a, norm_1_->Forward(work, x));
  SLUICE_ASSIGN_OR_RETURN(Act<T> b, attn_->Forward(work, a));
  SLUICE_ASSIGN_OR_RETURN(T * h, work.AllocateSaved(this->id(), n));
  SLUICE_RETURN_IF_ERROR(
      work.ops().Add(work.stream(), work.View(x), work.View(b), work.View(h, {x.rows, d_model_})));
  SLUICE_ASSIGN_OR_RETURN(Act<T> c, norm_2_->Forward(work, Act<T>{h, x.rows, d_model_}));
  SLUICE_ASSIGN_OR_RETURN(Act<T> d, mlp_->Forward(work, c));
  SLUICE_ASSIGN_OR_RETURN(T * y, work.AllocateSaved(this->id(), n));
  SLUICE_RETURN_IF_ERROR(work.ops().Add(work.stream(), work.View(h, {x.rows, d_model_}),
                                        work.View(d), work.View(y, {x.rows, d_model_})));
  return Act<T>{y, x.rows, d_model_};
}

template <typename T>
Result<Act<T>> DecoderBlock<T>::InnerBackward(ForwardContext<T>& work, ForwardContext<T>& out,
                                              Act<T> dy) {
  const int64_t n = dy.numel();
  SLUICE_ASSIGN_OR_RETURN(Act<T> dc, mlp_->Backward(work, dy));
  SLUICE_ASSIGN_OR_RETURN(Act<T> dh_norm, norm_2_->Backward(work, dc));
  ReleaseGradsOf(work, *mlp_);
  SLUICE_ASSIGN_OR_RETURN(Scratch<T> dh, work.AllocateScratch(n));
  SLUICE_RETURN_IF_ERROR(work.ops().Add(work.stream(), work.View(dy), work.View(dh_norm),
                                        work.View(dh.get(), {dy.rows, d_model_})));
  ReleaseGradsOf(work, *norm_2_);
  SLUICE_ASSIGN_OR_RETURN(Act<T> da, attn_->Backward(work, Act<T>{dh.get(), dy.rows, d_model_}));
  SLUICE_ASSIGN_OR_RETURN(Act<T> dx_norm, norm_1_->Backward(work, da));
  ReleaseGradsOf(work, *attn_);
  SLUICE_ASSIGN_OR_RETURN(T * dx, out.AllocateGrad(this->id(), n));
  SLUICE_RETURN_IF_ERROR(work.ops().Add(work.stream(), work.View(dh.get(), {dy.rows, d_model_}),
                                        work.View(dx_norm), work.View(dx, {dy.rows, d_model_})));
  ReleaseGradsOf(work, *norm_1_);
  work.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, d_model_};
}

template <typename T>
Result<Act<T>> DecoderBlock<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.cols, d_model_) << this->name();
  if (!checkpoint_) return InnerForward(ctx, x);
  if (inputs_->options().synchronize) SLUICE_RETURN_IF_ERROR(ctx.stream().Synchronize());
  SLUICE_RETURN_IF_ERROR(inputs_->Keep(ctx, this->id(), index_, x));
  T* y = nullptr;
  {
    ForwardContext<T> work = ctx.Child();
    SLUICE_ASSIGN_OR_RETURN(Act<T> inner, InnerForward(work, x));
    SLUICE_ASSIGN_OR_RETURN(y, ctx.AllocateSaved(this->id(), inner.numel()));
    SLUICE_RETURN_IF_ERROR(ctx.Copy(inner, y));
  }
  inputs_->HandOff(ctx, x.data, this->id(), y);
  return Act<T>{y, x.rows, d_model_};
}

template <typename T>
Result<Act<T>> DecoderBlock<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, d_model_) << this->name();
  if (!checkpoint_) return InnerBackward(ctx, ctx, dy);
  const CheckpointingOptions& how = inputs_->options();
  if (how.synchronize) SLUICE_RETURN_IF_ERROR(ctx.stream().Synchronize());
  Act<T> dx;
  {
    ForwardContext<T> work = ctx.Child();
    SLUICE_ASSIGN_OR_RETURN(T * x, inputs_->Restore(ctx, work, this->id(), index_, dy.rows));
    if (how.profile) SLUICE_RETURN_IF_ERROR(inputs_->BeginRecompute(ctx.stream(), index_));
    SLUICE_RETURN_IF_ERROR(InnerForward(work, Act<T>{x, dy.rows, d_model_}).status());
    if (how.profile) {
      SLUICE_RETURN_IF_ERROR(inputs_->EndRecompute(ctx.stream(), index_, this->name()));
    }
    SLUICE_ASSIGN_OR_RETURN(dx, InnerBackward(work, ctx, dy));
  }
  ctx.ReleaseSaved(this->id());
  SLUICE_RETURN_IF_ERROR(inputs_->Done(ctx, index_));
  return dx;
}

template class DecoderBlock<float>;
template class DecoderBlock<double>;

}  // namespace sluice::model
