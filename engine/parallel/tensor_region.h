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
// With sequence parallelism the region's input and output are this rank's slice of the rows
// (sequence_region.h): f becomes an all-gather of the rows (backward: a reduce-scatter of their
// gradient) and g a reduce-scatter (backward: an all-gather), Megatron-SP's pair. The gathered
// input is freed after the sublayer's forward and gathered again before its backward (one more
// all-gather, "tp.regather <name>"), so between the passes only this rank's slice stays.
#pragma once

#include <memory>
#include <string>

#include "engine/model/module.h"
#include "engine/parallel/sequence_region.h"
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
  // `sequence_parallel`: the all-gather and reduce-scatter instead, "tp.ag <name>" and
  // "tp.rs <name>" in the trace (each once forward and once backward).
  TensorParallelRegion(model::ModuleBuilder& builder, std::unique_ptr<model::Module<T>> sublayer,
                       TensorComm& comm, bool sequence_parallel = false);

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

  model::Module<T>& sublayer() const { return *sublayer_; }

 private:
  std::unique_ptr<model::Module<T>> f_;      // or the all-gather
  GatherFromSequence<T>* gather_ = nullptr;  // f_, with sequence parallelism
  std::unique_ptr<model::Module<T>> sublayer_;
  std::unique_ptr<model::Module<T>> g_;  // or the reduce-scatter
};

extern template class CopyToTensorRegion<float>;
extern template class CopyToTensorRegion<double>;
extern template class ReduceFromTensorRegion<float>;
extern template class ReduceFromTensorRegion<double>;
extern template class TensorParallelRegion<float>;
extern template class TensorParallelRegion<double>;

}  // namespace sluice::parallel
