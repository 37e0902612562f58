#include "engine/model/linear.h"

#include <utility>

namespace sluice::model {

template <typename T>
Linear<T>::Linear(ModuleBuilder& builder, std::string name, int64_t in, int64_t out, bool bias,
                  InitKind weight_init)
    : Module<T>(builder, std::move(name)) {
  weight_ = this->AddParameter(builder, "weight", {out, in}, weight_init);
  const Shape& local = builder.registry().parameter(weight_).shape;
  out_ = local.dim(0);
  in_ = local.dim(1);
  if (bias) {
    bias_ = this->AddParameter(builder, "bias", {out}, InitKind::kZeros);
    SLUICE_CHECK_EQ(builder.registry().parameter(bias_).shape.dim(0), out_) << this->name();
  }
}

template <typename T>
Linear<T>::Linear(ModuleBuilder& builder, std::string name, int64_t in, int64_t out,
                  int tied_weight)
    : Module<T>(builder, std::move(name)), in_(in), out_(out), tied_(true) {
  weight_ = builder.registry().AddAlias(this->name() + ".weight", tied_weight);
  this->UseParameter(weight_);
}

template <typename T>
std::unique_ptr<Linear<T>> Linear<T>::Tied(ModuleBuilder& builder, std::string name,
                                           int weight_param) {
  const Shape& shape = builder.registry().parameter(weight_param).shape;
  SLUICE_CHECK_EQ(shape.rank(), 2) << "tied weight " << shape.ToString();
  return std::unique_ptr<Linear<T>>(
      new Linear<T>(builder, std::move(name), shape.dim(1), shape.dim(0), weight_param));
}

template <typename T>
Result<Act<T>> Linear<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.cols, in_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * y, ctx.AllocateSaved(this->id(), x.rows * out_));
  ctx.KeepSaved(this->id(), x.data);
  const ParameterBinding<T>& params = ctx.params();
  SLUICE_RETURN_IF_ERROR(ctx.ops().LinearForward(
      ctx.stream(),
      {.x = ctx.View(x),
       .w = ctx.View(params.Value(weight_), {out_, in_}),
       .b = bias_ >= 0 && bias_in_forward_ ? ctx.View(params.Value(bias_), {out_}) : Tensor(),
       .y = ctx.View(y, {x.rows, out_})}));
  return Act<T>{y, x.rows, out_};
}

template <typename T>
Result<Act<T>> Linear<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, out_) << this->name();
  const T* x = ctx.Saved(this->id())[1];
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.rows * in_));
  const ParameterBinding<T>& params = ctx.params();
  T* dw = params.Grad(weight_);
  // A split backward leaves dW to the backward-weight, except a tied weight's: it accumulates
  // the embedding's gradient too, and deferring this one would reorder the two sums.
  const bool defer = dw != nullptr && ctx.defers_weight_grads() && !tied_;
  SLUICE_RETURN_IF_ERROR(ctx.ops().LinearBackward(
      ctx.stream(), {.x = ctx.View(x, {dy.rows, in_}),
                     .w = ctx.View(params.Value(weight_), {out_, in_}),
                     .dy = ctx.View(dy),
                     .dx = ctx.View(dx, {dy.rows, in_}),
                     .dw = defer ? Tensor() : ctx.View(dw, {out_, in_}),
                     .db = bias_ >= 0 ? ctx.View(params.Grad(bias_), {out_}) : Tensor()}));
  if (defer) {
    const int64_t rows = dy.rows;
    SLUICE_RETURN_IF_ERROR(ctx.DeferWeightGrad(
        x, in_, dy, weight_, [this, rows](ForwardContext<T>& w_ctx, const T* w_x, const T* w_dy) {
          return BackwardWeight(w_ctx, w_x, w_dy, rows);
        }));
  }
  ctx.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, in_};
}

template <typename T>
Status Linear<T>::BackwardWeight(ForwardContext<T>& ctx, const T* x, const T* dy,
                                 int64_t rows) const {
  T* dw = ctx.params().Grad(weight_);
  if (dw == nullptr) return OkStatus();
  const Tensor dw_view = ctx.View(dw, {out_, in_});
  // Without dx the op reads no weight (the values may not even be materialized now, bf16
  // storage widens them only while a unit runs): dW's view only gives w its checked shape.
  return ctx.ops().LinearBackward(ctx.stream(), {.x = ctx.View(x, {rows, in_}),
                                                 .w = dw_view,
                                                 .dy = ctx.View(dy, {rows, out_}),
                                                 .dx = Tensor(),
                                                 .dw = dw_view,
                                                 .db = Tensor()});
}

template class Linear<float>;
template class Linear<double>;

}  // namespace sluice::model
