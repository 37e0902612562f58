#include "engine/model/norm.h"

#include <utility>

#include "engine/model/ops_backend.h"

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
  Ops<T>::LayerNormForward(x.data, ctx.params().Value(weight_), ctx.params().Value(bias_), y, mean,
                           rstd, x.rows, dim_, eps_, ctx.num_threads());
  return Act<T>{y, x.rows, dim_};
}

template <typename T>
Result<Act<T>> LayerNorm<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, dim_) << this->name();
  const auto saved = ctx.Saved(this->id());
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.numel()));
  Ops<T>::LayerNormBackward(saved[3], ctx.params().Value(weight_), saved[1], saved[2], dy.data, dx,
                            ctx.params().Grad(weight_), ctx.params().Grad(bias_), dy.rows, dim_,
                            ctx.num_threads());
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
  Ops<T>::RmsNormForward(x.data, ctx.params().Value(weight_), y, rstd, x.rows, dim_, eps_,
                         ctx.num_threads());
  return Act<T>{y, x.rows, dim_};
}

template <typename T>
Result<Act<T>> RmsNorm<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, dim_) << this->name();
  const auto saved = ctx.Saved(this->id());
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.numel()));
  Ops<T>::RmsNormBackward(saved[2], ctx.params().Value(weight_), saved[1], dy.data, dx,
                          ctx.params().Grad(weight_), dy.rows, dim_, ctx.num_threads());
  ctx.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, dim_};
}

template class LayerNorm<float>;
template class LayerNorm<double>;
template class RmsNorm<float>;
template class RmsNorm<double>;

}  // namespace sluice::model
