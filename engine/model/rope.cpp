#include "engine/model/rope.h"

#include <utility>

#include "engine/model/ops_backend.h"

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
  Ops<T>::RopeForward(x.data, y, ctx.batch(), ctx.seq(), heads_, head_dim_, theta_,
                      ctx.num_threads());
  return Act<T>{y, x.rows, x.cols};
}

template <typename T>
Result<Act<T>> Rope<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, heads_ * head_dim_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.numel()));
  Ops<T>::RopeBackward(dy.data, dx, ctx.batch(), ctx.seq(), heads_, head_dim_, theta_,
                       ctx.num_threads());
  ctx.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, dy.cols};
}

template class Rope<float>;
template class Rope<double>;

}  // namespace sluice::model
