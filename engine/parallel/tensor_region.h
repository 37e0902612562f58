// Megatron's conjugate operators and the region they enclose (parallelism-study.md §2.1):
//   f (CopyToTensorRegion): forward the identity; backward all-reduces the input gradient, since
//     each tensor rank's column-parallel projections contribute only their heads' (or columns')
//     share of it;
//   g (ReduceFromTensorRegion): forward all-reduces the row-parallel projection's partial sums;
//     backward the identity;
//   TensorParallelRegion: f, then a sublayer whose first projections are column-parallel and
//     whose last is row-parallel (attention, MLP), then g. The tensor-parallel plan puts one
//     around each (tensor_plan.h); the sublayer itself knows nothing of it.
// Both all-reduce in place on the model's stream order (tensor_comm.h). f returns the gradient
// it was given and g the activation, reduced: a region's caller releases them as the wrapped
// sublayer's (ReleaseGradsOf(ctx, region) covers its descendants).
#pragma once

#include <memory>
#include <string>

#include "engine/model/module.h"
#include "engine/parallel/tensor_comm.h"

namespace sluice::parallel {

template <typename T>
class CopyToTensorRegion final : public model::Module<T> {
 public:
  CopyToTensorRegion(model::ModuleBuilder& builder, std::string name, TensorComm& comm)
      : model::Module<T>(builder, std::move(name)), comm_(&comm) {}

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

 private:
  TensorComm* comm_;
};

template <typename T>
class ReduceFromTensorRegion final : public model::Module<T> {
 public:
  ReduceFromTensorRegion(model::ModuleBuilder& builder, std::string name, TensorComm& comm)
      : model::Module<T>(builder, std::move(name)), comm_(&comm) {}

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

 private:
  TensorComm* comm_;
};

template <typename T>
class TensorParallelRegion final : public model::Module<T> {
 public:
  // Named after the sublayer ("<its name>.tp"); f and g are its "<name>.f" and "<name>.g", the
  // names their all-reduces carry in the trace ("tp.f transformer.h.0.attn", "tp.g ...").
  TensorParallelRegion(model::ModuleBuilder& builder, std::unique_ptr<model::Module<T>> sublayer,
                       TensorComm& comm);

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

  model::Module<T>& sublayer() const { return *sublayer_; }

 private:
  std::unique_ptr<CopyToTensorRegion<T>> f_;
  std::unique_ptr<model::Module<T>> sublayer_;
  std::unique_ptr<ReduceFromTensorRegion<T>> g_;
};

extern template class CopyToTensorRegion<float>;
extern template class CopyToTensorRegion<double>;
extern template class ReduceFromTensorRegion<float>;
extern template class ReduceFromTensorRegion<double>;
extern template class TensorParallelRegion<float>;
extern template class TensorParallelRegion<double>;

}  // namespace sluice::parallel
