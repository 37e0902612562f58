#include "engine/parallel/tensor_region.h"

#include <utility>

namespace sluice::parallel {

using model::Act;
using model::ForwardContext;

template <typename T>
Result<Act<T>> CopyToTensorRegion<T>::Forward(ForwardContext<T>&, Act<T> x) {
  return x;
}

template <typename T>
Result<Act<T>> CopyToTensorRegion<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_RETURN_IF_ERROR(
      comm_->AllReduce(ctx.stream(), dy.data, dy.numel(), "tp.f " + this->name()));
  return dy;
}

template <typename T>
Result<Act<T>> ReduceFromTensorRegion<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_RETURN_IF_ERROR(comm_->AllReduce(ctx.stream(), x.data, x.numel(), "tp.g " + this->name()));
  return x;
}

template <typename T>
Result<Act<T>> ReduceFromTensorRegion<T>::Backward(ForwardContext<T>&, Act<T> dy) {
  return dy;
}

namespace {

// "transformer.h.0.attn" for f and g of that sublayer.
std::string BaseName(const std::string& region_name) {
  return region_name.substr(0, region_name.size() - 3);  // drops ".tp"
}

}  // namespace

template <typename T>
TensorParallelRegion<T>::TensorParallelRegion(model::ModuleBuilder& builder,
                                              std::unique_ptr<model::Module<T>> sublayer,
                                              TensorComm& comm, bool sequence_parallel)
    : model::Module<T>(builder, sublayer->name() + ".tp"), sublayer_(std::move(sublayer)) {
  const std::string base = BaseName(this->name());
  if (sequence_parallel) {
    auto gather = std::make_unique<GatherFromSequence<T>>(builder, base, comm);
    gather_ = gather.get();
    f_ = std::move(gather);
    g_ = std::make_unique<ReduceScatterToSequence<T>>(builder, base, comm);
  } else {
    f_ = std::make_unique<CopyToTensorRegion<T>>(builder, base, comm);
    g_ = std::make_unique<ReduceFromTensorRegion<T>>(builder, base, comm);
  }
  this->AddChild(f_.get());
  this->AddChild(sublayer_.get());
  this->AddChild(g_.get());
}

template <typename T>
Result<Act<T>> TensorParallelRegion<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_ASSIGN_OR_RETURN(Act<T> copied, f_->Forward(ctx, x));
  SLUICE_ASSIGN_OR_RETURN(Act<T> partial, sublayer_->Forward(ctx, copied));
  if (gather_ != nullptr) gather_->Drop(ctx, x, copied);
  return g_->Forward(ctx, partial);
}

template <typename T>
Result<Act<T>> TensorParallelRegion<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_ASSIGN_OR_RETURN(Act<T> dpartial, g_->Backward(ctx, dy));
  if (gather_ != nullptr) {
    SLUICE_RETURN_IF_ERROR(gather_->Regather(ctx, sublayer_->AllModuleIds()));
  }
  SLUICE_ASSIGN_OR_RETURN(Act<T> dcopied, sublayer_->Backward(ctx, dpartial));
  ctx.ReleaseGrads(g_->id());  // the sequence-parallel one's gathered gradient, used
  return f_->Backward(ctx, dcopied);
}

template class CopyToTensorRegion<float>;
template class CopyToTensorRegion<double>;
template class ReduceFromTensorRegion<float>;
template class ReduceFromTensorRegion<double>;
template class TensorParallelRegion<float>;
template class TensorParallelRegion<double>;

}  // namespace sluice::parallel
