#include "engine/model/rope.h"

#include <utility>

namespace sluice::model {

template <typename T>
Rope<T>::Rope(ModuleBuilder& builder, std::string name, int64_t heads, int64_t head_dim,
              double theta)
    : Module<T>(builder, std::move(name)),
      heads_(heads),
      head_dim_(head_dim),
      theta_(static_cast<float>(theta)) {}

template <typename T>
Result<Act<T>> Rope<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.cols, heads_ * head_dim_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * y, ctx.AllocateSaved(this->id(), x.numel()));
  const Shape shape{ctx.batch(), ctx.seq(), heads_, head_dim_};
  SLUICE_RETURN_IF_ERROR(ctx.ops().RopeForward(
      ctx.stream(), {.x = ctx.View(x.data, shape), .y = ctx.View(y, shape), .theta = theta_}));
  return Act<T>{y, x.rows, x.cols};
}

template <typename T>
Result<Act<T>> Rope<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, heads_ * head_dim_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.numel()));
  const Shape shape{ctx.batch(), ctx.seq(), heads_, head_dim_};
  SLUICE_RETURN_IF_ERROR(ctx.ops().RopeBackward(
      ctx.stream(), {.dy = ctx.View(dy.data, shape), .dx = ctx.View(dx, shape), .theta = theta_}));
  ctx.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, dy.cols};
}

template class Rope<float>;
template class Rope<double>;

}  // namespace sluice::model
