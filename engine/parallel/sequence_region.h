// Megatron's sequence-parallel operators (parallelism-study.md §2.1, §3.1), over the rows of an
// activation. Sluice's activations are [rows = batch * seq, width] row-major, token-major, so
// tensor rank r's "slice of the sequence" is the contiguous rows [r * rows / t, (r + 1) * rows /
// t): the same split as Megatron's along its [s, b, h] dim 0 for every op that works row by row
// (norms, residual adds, the elementwise ones), which are the only ones that run on a slice.
// Attention, which mixes rows, runs only inside a region on the gathered rows. The slices are
// equal: the token count of a micro-batch must divide by the tensor size (CheckSequenceSplit).
//   ScatterToSequence: forward keeps this rank's rows (a view, no copy); backward all-gathers
//     the rows' gradients ("tp.ag <name>").
//   GatherFromSequence: forward all-gathers the rows ("tp.ag <name>"); backward reduce-scatters
//     the gradient ("tp.rs <name>": the consumer was split across the ranks, each contributing
//     part of every row's gradient) or, `split_backward`, keeps this rank's rows of it (the
//     consumer is replicated, so every rank holds the same whole gradient). In a region the
//     gathered rows are freed after the sublayer's forward and gathered again before its
//     backward ("tp.regather <name>"), as Megatron keeps only the slice for its weight
//     gradients: the memory of sequence parallelism, for one more all-gather per region.
//   ReduceScatterToSequence: forward reduce-scatters the partial sums of a row-parallel
//     projection ("tp.rs <name>"), in place: the output is this rank's rows of its input;
//     backward all-gathers the gradient ("tp.ag <name>").
// A tensor-parallel region under sequence parallelism is GatherFromSequence, the sublayer, then
// ReduceScatterToSequence (tensor_region.h): the all-gather and reduce-scatter move the bytes of
// the all-reduce they replace (ring: (t-1)/t of the buffer each, against 2(t-1)/t); the
// backward's re-gather is the extra all-gather Megatron pays for the memory.
// What an output view points into stays alive as its producer's saved activation, as every
// module's input does; a gradient returned as a view into dy is the consumer's, released with
// it (the region's callers release the whole region's grads at once).
#pragma once

#include <span>
#include <string>

#include "engine/model/module.h"
#include "engine/parallel/tensor_comm.h"

namespace sluice::parallel {

// OK, or InvalidArgument naming tensor_parallel.sequence_parallel when the micro-batch's rows do
// not split into `tensor` equal slices.
Status CheckSequenceSplit(int64_t batch, int64_t seq, int64_t tensor);

template <typename T>
class ScatterToSequence final : public model::Module<T> {
 public:
  // `name` labels its collective ("tp.ag <name>"); the module is "<name>.sp.scatter".
  ScatterToSequence(model::ModuleBuilder& builder, const std::string& name, TensorComm& comm)
      : model::Module<T>(builder, name + ".sp.scatter"), label_(name), comm_(&comm) {}

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

 private:
  std::string label_;
  TensorComm* comm_;
};

template <typename T>
class GatherFromSequence final : public model::Module<T> {
 public:
  GatherFromSequence(model::ModuleBuilder& builder, const std::string& name, TensorComm& comm,
                     bool split_backward = false)
      : model::Module<T>(builder, name + ".sp.gather"),
        label_(name),
        comm_(&comm),
        split_backward_(split_backward) {}

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

  // Megatron's memory saving, for a region: once its consumers' forward is enqueued, frees the
  // gathered rows and keeps only this rank's (`x`, kept alive by its producer). Before their
  // backward, Regather gathers them again ("tp.regather <name>") into a new buffer and points
  // the views the consumers (`consumer_ids`) saved of the old one at it.
  void Drop(model::ForwardContext<T>& ctx, model::Act<T> x, model::Act<T> gathered);
  Status Regather(model::ForwardContext<T>& ctx, std::span<const int> consumer_ids);

 private:
  std::string label_;
  TensorComm* comm_;
  bool split_backward_;
  int64_t cols_ = 0;
};

template <typename T>
class ReduceScatterToSequence final : public model::Module<T> {
 public:
  ReduceScatterToSequence(model::ModuleBuilder& builder, const std::string& name, TensorComm& comm)
      : model::Module<T>(builder, name + ".sp.reduce_scatter"), label_(name), comm_(&comm) {}

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

 private:
  std::string label_;
  TensorComm* comm_;
};

// A unit of a sequence-parallel model whose input or output is whole rows while the residual
// stream around it is split: the embeddings (whole rows out: scattered), the first block of a
// later pipeline stage (whole rows in from the previous stage: scattered), the last unit of a
// stage before the last (gathered for the next stage, which scatters them again: the backward
// keeps this rank's rows), a replicated LM head (gathered, the same). It wraps the unit (not
// owned; it must outlive this) and runs `in`, the unit, then `out`.
enum class SequenceEdge : uint8_t { kNone, kScatter, kGather };

template <typename T>
class SequenceParallelUnit final : public model::Module<T> {
 public:
  SequenceParallelUnit(model::ModuleBuilder& builder, model::Module<T>& unit, TensorComm& comm,
                       SequenceEdge in, SequenceEdge out);

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

 private:
  std::unique_ptr<model::Module<T>> MakeEdge(model::ModuleBuilder& builder, SequenceEdge edge,
                                             const std::string& name, TensorComm& comm);

  std::unique_ptr<model::Module<T>> in_;  // or null
  model::Module<T>* unit_;
  std::unique_ptr<model::Module<T>> out_;  // or null
};

extern template class ScatterToSequence<float>;
extern template class ScatterToSequence<double>;
extern template class GatherFromSequence<float>;
extern template class GatherFromSequence<double>;
extern template class ReduceScatterToSequence<float>;
extern template class ReduceScatterToSequence<double>;
extern template class SequenceParallelUnit<float>;
extern template class SequenceParallelUnit<double>;

}  // namespace sluice::parallel
