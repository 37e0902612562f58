#include "engine/model/mlp.h"

#include <utility>

namespace sluice::model {

// Saved by the module itself, in order: the activation output a, then the views it was computed
// from (GELU: the c_fc output; SwiGLU: the gate and up outputs).
template <typename T>
Mlp<T>::Mlp(ModuleBuilder& builder, std::string name, const MlpOptions& options)
    : Module<T>(builder, std::move(name)), options_(options) {
  const std::string& prefix = this->name();
  const int64_t d = options.d_model;
  const int64_t ff = options.d_ff;
  if (options.swiglu) {
    in_ = std::make_unique<Linear<T>>(builder, prefix + ".gate_proj", d, ff, options.bias);
    up_ = std::make_unique<Linear<T>>(builder, prefix + ".up_proj", d, ff, options.bias);
    out_ = std::make_unique<Linear<T>>(builder, prefix + ".down_proj", ff, d, options.bias,
                                       InitKind::kNormalResidual);
  } else {
    in_ = std::make_unique<Linear<T>>(builder, prefix + ".c_fc", d, ff, options.bias);
    out_ = std::make_unique<Linear<T>>(builder, prefix + ".c_proj", ff, d, options.bias,
                                       InitKind::kNormalResidual);
  }
  ff_ = in_->out();  // a tensor rank's share of d_ff when the plan split the projections
  SLUICE_CHECK(out_->in() == ff_ && (up_ == nullptr || up_->out() == ff_))
      << this->name() << ": hidden widths " << ff_ << " and " << out_->in();
  this->AddChild(in_.get());
  if (up_ != nullptr) this->AddChild(up_.get());
  this->AddChild(out_.get());
}

template <typename T>
Result<Act<T>> Mlp<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  const int id = this->id();
  SLUICE_ASSIGN_OR_RETURN(Act<T> h, in_->Forward(ctx, x));
  SLUICE_ASSIGN_OR_RETURN(T * a, ctx.AllocateSaved(id, h.numel()));
  ctx.KeepSaved(id, h.data);
  if (up_ != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(Act<T> up, up_->Forward(ctx, x));
    ctx.KeepSaved(id, up.data);
    SLUICE_RETURN_IF_ERROR(ctx.ops().SwiGluForward(
        ctx.stream(),
        {.gate = ctx.View(h), .up = ctx.View(up), .y = ctx.View(a, {h.rows, h.cols})}));
  } else {
    SLUICE_RETURN_IF_ERROR(ctx.ops().GeluForward(
        ctx.stream(), {.x = ctx.View(h), .y = ctx.View(a, {h.rows, h.cols})}));
  }
  return out_->Forward(ctx, Act<T>{a, h.rows, h.cols});
}

template <typename T>
Result<Act<T>> Mlp<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  const int id = this->id();
  const int64_t n = dy.rows * ff_;
  SLUICE_ASSIGN_OR_RETURN(Act<T> da, out_->Backward(ctx, dy));
  const auto saved = ctx.Saved(id);
  SLUICE_ASSIGN_OR_RETURN(Scratch<T> dh, ctx.AllocateScratch(n));
  if (up_ == nullptr) {
    SLUICE_RETURN_IF_ERROR(
        ctx.ops().GeluBackward(ctx.stream(), {.x = ctx.View(saved[1], {dy.rows, ff_}),
                                              .dy = ctx.View(da),
                                              .dx = ctx.View(dh.get(), {dy.rows, ff_})}));
    ReleaseGradsOf(ctx, *out_);
    ctx.ReleaseSaved(id);
    return in_->Backward(ctx, Act<T>{dh.get(), dy.rows, ff_});
  }
  SLUICE_ASSIGN_OR_RETURN(Scratch<T> dup, ctx.AllocateScratch(n));
  const Shape shape{dy.rows, ff_};
  SLUICE_RETURN_IF_ERROR(
      ctx.ops().SwiGluBackward(ctx.stream(), {.gate = ctx.View(saved[1], shape),
                                              .up = ctx.View(saved[2], shape),
                                              .dy = ctx.View(da),
                                              .dgate = ctx.View(dh.get(), shape),
                                              .dup = ctx.View(dup.get(), shape)}));
  ReleaseGradsOf(ctx, *out_);
  ctx.ReleaseSaved(id);
  SLUICE_ASSIGN_OR_RETURN(Act<T> dx_gate, in_->Backward(ctx, Act<T>{dh.get(), dy.rows, ff_}));
  SLUICE_ASSIGN_OR_RETURN(Act<T> dx_up, up_->Backward(ctx, Act<T>{dup.get(), dy.rows, ff_}));
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(id, dx_gate.numel()));
  SLUICE_RETURN_IF_ERROR(ctx.ops().Add(ctx.stream(), ctx.View(dx_gate), ctx.View(dx_up),
                                       ctx.View(dx, {dy.rows, options_.d_model})));
  ReleaseGradsOf(ctx, *in_);
  ReleaseGradsOf(ctx, *up_);
  return Act<T>{dx, dy.rows, options_.d_model};
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace sluice::model
