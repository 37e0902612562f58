#include "engine/model/norm.h"

#include <utility>

namespace sluice::model {

// Saved, in order: y, mean, rstd, x (a view).
template <typename T>
LayerNorm<T>::LayerNorm(ModuleBuilder& builder, std::string name, int64_t dim, float eps)
    : Module<T>(builder, std::move(name)), dim_(dim), eps_(eps) {
  weight_ = this->AddParameter(builder, "weight", {dim}, InitKind::kOnes);
  bias_ = this->AddParameter(builder, "bias", {dim}, InitKind::kZeros);
}

template <typename T>
Result<Act<T>> LayerNorm<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.cols, dim_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * y, ctx.AllocateSaved(this->id(), x.numel()));
  SLUICE_ASSIGN_OR_RETURN(T * mean, ctx.AllocateSaved(this->id(), x.rows));
  SLUICE_ASSIGN_OR_RETURN(T * rstd, ctx.AllocateSaved(this->id(), x.rows));
  ctx.KeepSaved(this->id(), x.data);
  SLUICE_RETURN_IF_ERROR(ctx.ops().LayerNormForward(
      ctx.stream(), {.x = ctx.View(x),
                     .gamma = ctx.View(ctx.params().Value(weight_), {dim_}),
                     .beta = ctx.View(ctx.params().Value(bias_), {dim_}),
                     .y = ctx.View(y, {x.rows, dim_}),
                     .mean = ctx.View(mean, {x.rows}),
                     .rstd = ctx.View(rstd, {x.rows}),
                     .eps = eps_}));
  return Act<T>{y, x.rows, dim_};
}

template <typename T>
Result<Act<T>> LayerNorm<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, dim_) << this->name();
  const auto saved = ctx.Saved(this->id());
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.numel()));
  SLUICE_RETURN_IF_ERROR(ctx.ops().LayerNormBackward(
      ctx.stream(), {.x = ctx.View(saved[3], {dy.rows, dim_}),
                     .gamma = ctx.View(ctx.params().Value(weight_), {dim_}),
                     .mean = ctx.View(saved[1], {dy.rows}),
                     .rstd = ctx.View(saved[2], {dy.rows}),
                     .dy = ctx.View(dy),
                     .dx = ctx.View(dx, {dy.rows, dim_}),
                     .dgamma = ctx.View(ctx.params().Grad(weight_), {dim_}),
                     .dbeta = ctx.View(ctx.params().Grad(bias_), {dim_})}));
  ctx.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, dim_};
}

// Saved, in order: y, rstd, x (a view).
template <typename T>
RmsNorm<T>::RmsNorm(ModuleBuilder& builder, std::string name, int64_t dim, float eps)
    : Module<T>(builder, std::move(name)), dim_(dim), eps_(eps) {
  weight_ = this->AddParameter(builder, "weight", {dim}, InitKind::kOnes);
}

template <typename T>
Result<Act<T>> RmsNorm<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.cols, dim_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * y, ctx.AllocateSaved(this->id(), x.numel()));
  SLUICE_ASSIGN_OR_RETURN(T * rstd, ctx.AllocateSaved(this->id(), x.rows));
  ctx.KeepSaved(this->id(), x.data);
  SLUICE_RETURN_IF_ERROR(ctx.ops().RmsNormForward(
      ctx.stream(), {.x = ctx.View(x),
                     .gamma = ctx.View(ctx.params().Value(weight_), {dim_}),
                     .y = ctx.View(y, {x.rows, dim_}),
                     .rstd = ctx.View(rstd, {x.rows}),
                     .eps = eps_}));
  return Act<T>{y, x.rows, dim_};
}

template <typename T>
Result<Act<T>> RmsNorm<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, dim_) << this->name();
  const auto saved = ctx.Saved(this->id());
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.numel()));
  SLUICE_RETURN_IF_ERROR(ctx.ops().RmsNormBackward(
      ctx.stream(), {.x = ctx.View(saved[2], {dy.rows, dim_}),
                     .gamma = ctx.View(ctx.params().Value(weight_), {dim_}),
                     .rstd = ctx.View(saved[1], {dy.rows}),
                     .dy = ctx.View(dy),
                     .dx = ctx.View(dx, {dy.rows, dim_}),
                     .dgamma = ctx.View(ctx.params().Grad(weight_), {dim_})}));
  ctx.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, dim_};
}

template class LayerNorm<float>;
template class LayerNorm<double>;
template class RmsNorm<float>;
template class RmsNorm<double>;

}  // namespace sluice::model
