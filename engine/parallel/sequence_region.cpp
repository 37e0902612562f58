#include "engine/parallel/sequence_region.h"

#include <utility>

namespace sluice::parallel {

using model::Act;
using model::ForwardContext;

Status CheckSequenceSplit(int64_t batch, int64_t seq, int64_t tensor) {
  if ((batch * seq) % tensor == 0) return OkStatus();
  return InvalidArgumentError(
      "tensor_parallel.sequence_parallel splits each micro-batch's {} x {} = {} tokens into {} "
      "equal slices, one per tensor rank, and {} does not divide by {}; use a micro-batch size "
      "or sequence length whose product divides by tensor_parallel.autotp_size, or turn "
      "sequence_parallel off",
      batch, seq, batch * seq, tensor, batch * seq, tensor);
}

namespace {

// This rank's rows of a whole [rows, cols] activation.
template <typename T>
Act<T> RowsOf(Act<T> whole, const TensorComm& comm) {
  const int64_t rows = whole.rows / comm.size();
  return Act<T>{whole.data + comm.rank() * rows * whole.cols, rows, whole.cols};
}

// A new [rows * size, cols] buffer (as `id`'s grads or saved) holding every rank's `part`,
// gathered in place.
template <typename T>
Result<Act<T>> GatherRows(ForwardContext<T>& ctx, TensorComm& comm, Act<T> part, T* whole,
                          const std::string& label) {
  const Act<T> out{whole, part.rows * comm.size(), part.cols};
  SLUICE_RETURN_IF_ERROR(ctx.Copy(part, RowsOf(out, comm).data));
  SLUICE_RETURN_IF_ERROR(comm.AllGather(ctx.stream(), whole, part.numel(), "tp.ag " + label));
  return out;
}

// The sum over the ranks of this rank's rows of `whole`, in place: a view of those rows.
template <typename T>
Result<Act<T>> ReduceScatterRows(ForwardContext<T>& ctx, TensorComm& comm, Act<T> whole,
                                 const std::string& label) {
  SLUICE_CHECK_EQ(whole.rows % comm.size(), 0) << label;
  const Act<T> mine = RowsOf(whole, comm);
  SLUICE_RETURN_IF_ERROR(
      comm.ReduceScatter(ctx.stream(), whole.data, mine.data, mine.numel(), "tp.rs " + label));
  return mine;
}

}  // namespace

template <typename T>
Result<Act<T>> ScatterToSequence<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.rows, ctx.rows()) << this->name();
  SLUICE_RETURN_IF_ERROR(CheckSequenceSplit(ctx.batch(), ctx.seq(), comm_->size()));
  return RowsOf(x, *comm_);
}

template <typename T>
Result<Act<T>> ScatterToSequence<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_ASSIGN_OR_RETURN(T * whole, ctx.AllocateGrad(this->id(), dy.numel() * comm_->size()));
  return GatherRows(ctx, *comm_, dy, whole, label_);
}

template <typename T>
Result<Act<T>> GatherFromSequence<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.rows * comm_->size(), ctx.rows()) << this->name();
  cols_ = x.cols;  // a property of the model (d_model), the same for every pass
  SLUICE_ASSIGN_OR_RETURN(T * whole, ctx.AllocateSaved(this->id(), x.numel() * comm_->size()));
  return GatherRows(ctx, *comm_, x, whole, label_);
}

// Saved after Drop: this rank's rows (a view), the freed buffer's address (never read through).
template <typename T>
void GatherFromSequence<T>::Drop(ForwardContext<T>& ctx, Act<T> x, Act<T> gathered) {
  SLUICE_CHECK_EQ(ctx.Saved(this->id()).size(), 1u) << this->name();
  SLUICE_CHECK_EQ(ctx.Saved(this->id())[0], gathered.data) << this->name();
  ctx.ReleaseSaved(this->id());  // freed on the stream, after the consumers' forward
  ctx.KeepSaved(this->id(), x.data);
  ctx.KeepSaved(this->id(), gathered.data);
}

template <typename T>
Status GatherFromSequence<T>::Regather(ForwardContext<T>& ctx, std::span<const int> consumer_ids) {
  const auto saved = ctx.Saved(this->id());
  SLUICE_CHECK_EQ(saved.size(), 2u) << this->name() << ": Regather without Drop";
  T* const x = saved[0];
  T* const old = saved[1];
  const int64_t rows = ctx.rows() / comm_->size();
  const int64_t cols = cols_;
  SLUICE_ASSIGN_OR_RETURN(T * whole, ctx.AllocateSaved(this->id(), ctx.rows() * cols));
  const Act<T> out{whole, ctx.rows(), cols};
  SLUICE_RETURN_IF_ERROR(ctx.Copy(Act<T>{x, rows, cols}, RowsOf(out, *comm_).data));
  SLUICE_RETURN_IF_ERROR(
      comm_->AllGather(ctx.stream(), whole, rows * cols, "tp.regather " + label_));
  ctx.RebaseSaved(consumer_ids, old, ctx.rows() * cols, whole);
  return OkStatus();
}

template <typename T>
Result<Act<T>> GatherFromSequence<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  ctx.ReleaseSaved(this->id());
  if (split_backward_) return RowsOf(dy, *comm_);
  return ReduceScatterRows(ctx, *comm_, dy, label_);
}

template <typename T>
Result<Act<T>> ReduceScatterToSequence<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.rows, ctx.rows()) << this->name();
  SLUICE_RETURN_IF_ERROR(CheckSequenceSplit(ctx.batch(), ctx.seq(), comm_->size()));
  return ReduceScatterRows(ctx, *comm_, x, label_);
}

template <typename T>
Result<Act<T>> ReduceScatterToSequence<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_ASSIGN_OR_RETURN(T * whole, ctx.AllocateGrad(this->id(), dy.numel() * comm_->size()));
  return GatherRows(ctx, *comm_, dy, whole, label_);
}

template <typename T>
SequenceParallelUnit<T>::SequenceParallelUnit(model::ModuleBuilder& builder, model::Module<T>& unit,
                                              TensorComm& comm, SequenceEdge in, SequenceEdge out)
    : model::Module<T>(builder, unit.name() + ".sp"), unit_(&unit) {
  // Both edges are labelled with the unit's name: "tp.ag transformer" (GPT-2's embeddings).
  SLUICE_CHECK(in == SequenceEdge::kNone || in != out) << unit.name();
  in_ = MakeEdge(builder, in, unit.name(), comm);
  out_ = MakeEdge(builder, out, unit.name(), comm);
  if (in_ != nullptr) this->AddChild(in_.get());
  this->AddChild(unit_);
  if (out_ != nullptr) this->AddChild(out_.get());
}

// Between stages and before a replicated head the whole rows' consumer is replicated: a gather's
// backward keeps this rank's rows of the (identical) gradient.
template <typename T>
std::unique_ptr<model::Module<T>> SequenceParallelUnit<T>::MakeEdge(model::ModuleBuilder& builder,
                                                                    SequenceEdge edge,
                                                                    const std::string& name,
                                                                    TensorComm& comm) {
  switch (edge) {
    case SequenceEdge::kNone:
      return nullptr;
    case SequenceEdge::kScatter:
      return std::make_unique<ScatterToSequence<T>>(builder, name, comm);
    case SequenceEdge::kGather:
      return std::make_unique<GatherFromSequence<T>>(builder, name, comm,
                                                     /*split_backward=*/true);
  }
  return nullptr;
}

template <typename T>
Result<Act<T>> SequenceParallelUnit<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  if (in_ != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(x, in_->Forward(ctx, x));
  }
  SLUICE_ASSIGN_OR_RETURN(Act<T> y, unit_->Forward(ctx, x));
  if (out_ != nullptr) return out_->Forward(ctx, y);
  return y;
}

template <typename T>
Result<Act<T>> SequenceParallelUnit<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  if (out_ != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(dy, out_->Backward(ctx, dy));
  }
  SLUICE_ASSIGN_OR_RETURN(Act<T> dx, unit_->Backward(ctx, dy));
  if (out_ != nullptr) model::ReleaseGradsOf(ctx, *out_);  // the unit has used it
  if (in_ == nullptr || dx.empty()) return dx;
  return in_->Backward(ctx, dx);
}

template class ScatterToSequence<float>;
template class ScatterToSequence<double>;
template class GatherFromSequence<float>;
template class GatherFromSequence<double>;
template class ReduceScatterToSequence<float>;
template class ReduceScatterToSequence<double>;
template class SequenceParallelUnit<float>;
template class SequenceParallelUnit<double>;

}  // namespace sluice::parallel
