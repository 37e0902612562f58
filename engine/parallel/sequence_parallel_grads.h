// The gradients sequence parallelism leaves partial (tensor_plan.h): a norm's weight and bias
// are replicated on every tensor rank but see only that rank's slice of the rows, so each rank's
// gradient is the sum over its own tokens (TensorSharding::partial_grad). Summing them over the
// tensor group gives every rank the whole model's gradient, as Megatron's finalize_model_grads
// does for its `sequence_parallel` parameters (parallelism-study.md §3.2). Without sequence
// parallelism no parameter is marked and these do nothing.
//
// When: after the backward has accumulated the gradients (all micro-batches, or the unit whose
// gradients are bound) and before they are used or reduced over the data-parallel group (either
// order gives the same sum; before keeps a ZeRO partition's reduce-scatter unchanged). Every
// tensor rank must make the same calls with the same parameters, as with any collective.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "engine/model/parameter_registry.h"
#include "engine/parallel/tensor_comm.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::parallel {

// The registry indices of the parameters with partial gradients, among `params` (every one of
// the registry's when empty), in that order; aliases are left out (their owner holds the
// gradient).
std::vector<int> PartialGradParameters(const model::ParameterRegistry& registry,
                                       std::span<const int> params = {});

// For each parameter p with a partial gradient among `params` (all when empty): grad(p)[0 ..
// numel) = its sum over the tensor ranks of `comm`, in place, after the work enqueued on `stream`
// so far and before what is enqueued there next (tensor_comm.h: the host does not wait).
// grad(p) null skips p, which it must do on every tensor rank alike. Parameters whose gradients
// lie end to end (a norm's weight and bias in a flat buffer) go in one all-reduce, traced
// "tp.sp.grads <first parameter's name>".
template <typename T>
Status ReduceSequenceParallelGrads(TensorComm& comm, Stream& stream,
                                   const model::ParameterRegistry& registry,
                                   const std::function<T*(int param)>& grad,
                                   std::span<const int> params = {});

// The same over a flat gradient buffer laid out as the registry says (ParameterInfo::offset):
// the model's own grads_data().
template <typename T>
Status ReduceSequenceParallelGrads(TensorComm& comm, Stream& stream,
                                   const model::ParameterRegistry& registry, T* flat_grads);

}  // namespace sluice::parallel
