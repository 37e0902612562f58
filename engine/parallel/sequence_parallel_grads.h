// The gradients sequence parallelism leaves partial (tensor_plan.h): a norm's weight and bias
// are replicated on every tensor rank but see only that rank's slice of the rows, so each rank's
// gradient is the sum over its own tokens (TensorSharding::partial_grad). Summing them over the
// tensor group gives every rank the whole model's gradient, as Megatron's finalize_model_grads
// does for its `sequence_parallel` parameters (parallelism-study.md §3.2). Without sequence
// parallelism no parameter is marked and these do nothing.
//
// Grouped-query attention with fewer key/value heads than tensor ranks leaves partial gradients
// too: a k_proj/v_proj piece is shared by the consecutive ranks of its share group
// (TensorSharding::shared, tensor_layout.h), each of which computes its own query heads'
// contribution. Those are summed over the share group alone, on a communicator split from the
// tensor group (SplitShareGroup: every rank all-reduces just its piece, in place), rather than
// over the whole tensor group with zeros from the ranks holding other pieces, which would move
// and stage the whole k/v weight on every rank. With one key/value head the piece is the whole
// tensor, replicated and partial over the tensor group, and is summed with the norms.
//
// When: after the backward has accumulated the gradients (all micro-batches, or the unit whose
// gradients are bound) and before they are used or reduced over the data-parallel group (either
// order gives the same sum; before keeps a ZeRO partition's reduce-scatter unchanged). Every
// tensor rank must make the same calls with the same parameters, as with any collective.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/model/parameter_registry.h"
#include "engine/parallel/tensor_comm.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::parallel {

// The ranks a partial gradient is summed over.
enum class PartialOver : uint8_t {
  kTensorGroup,  // a replicated parameter's: every tensor rank
  kShareGroup,   // a shared piece's: the ranks of its share group (SplitShareGroup)
};

// The registry indices of the parameters with partial gradients summed over `over`, among
// `params` (every one of the registry's when empty), in that order; aliases are left out (their
// owner holds the gradient).
std::vector<int> PartialGradParameters(const model::ParameterRegistry& registry,
                                       std::span<const int> params = {},
                                       PartialOver over = PartialOver::kTensorGroup);

// The size of the share groups of the registry's shared pieces (all have the same: the key/value
// projections'); 1 when there are none.
int64_t ShareGroupSize(const model::ParameterRegistry& registry);

// The share group of tensor rank tensor.rank(): the `replicas` consecutive ranks
// [rank / replicas * replicas, + replicas) of `tensor`. Collective over `tensor`.
Result<std::unique_ptr<Comm>> SplitShareGroup(Comm& tensor, int64_t replicas);

// For each parameter p with a partial gradient summed over `over` among `params` (all when
// empty): grad(p)[0 .. numel) = its sum over the ranks of `comm` (the tensor group, or this rank's
// share group), in place, after the work enqueued on `stream`
// so far and before what is enqueued there next (tensor_comm.h: the host does not wait).
// grad(p) null skips p, which it must do on every tensor rank alike. Parameters whose gradients
// lie end to end (a norm's weight and bias in a flat buffer) go in one all-reduce, traced
// "tp.sp.grads <first parameter's name>" (the tensor group) or "tp.kv.grads <...>" (the share
// group).
template <typename T>
Status ReduceSequenceParallelGrads(TensorComm& comm, Stream& stream,
                                   const model::ParameterRegistry& registry,
                                   const std::function<T*(int param)>& grad,
                                   std::span<const int> params = {},
                                   PartialOver over = PartialOver::kTensorGroup);

// The same over a flat gradient buffer laid out as the registry says (ParameterInfo::offset):
// the model's own grads_data().
template <typename T>
Status ReduceSequenceParallelGrads(TensorComm& comm, Stream& stream,
                                   const model::ParameterRegistry& registry, T* flat_grads,
                                   PartialOver over = PartialOver::kTensorGroup);

}  // namespace sluice::parallel
