#include "engine/parallel/tensor_vocab.h"

#include <string>
#include <utility>

#include "engine/parallel/sequence_region.h"

namespace sluice::parallel {

using model::Act;
using model::ForwardContext;

template <typename T>
VocabParallelEmbedding<T>::VocabParallelEmbedding(model::ModuleBuilder& builder,
                                                  std::unique_ptr<model::TokenEmbedding<T>> table,
                                                  const ops::VocabShard& shard, TensorComm& comm,
                                                  bool reduce_scatter)
    : model::Module<T>(builder, table->name() + ".vp"), table_(std::move(table)) {
  table_->SetVocabShard(shard);
  if (reduce_scatter) {
    g_ = std::make_unique<ReduceScatterToSequence<T>>(builder, table_->name(), comm);
  } else {
    g_ = std::make_unique<ReduceFromTensorRegion<T>>(builder, table_->name(), comm);
  }
  this->AddChild(table_.get());
  this->AddChild(g_.get());
}

template <typename T>
Result<Act<T>> VocabParallelEmbedding<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_ASSIGN_OR_RETURN(Act<T> partial, table_->Forward(ctx, x));
  return g_->Forward(ctx, partial);
}

template <typename T>
Result<Act<T>> VocabParallelEmbedding<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_ASSIGN_OR_RETURN(Act<T> dpartial, g_->Backward(ctx, dy));
  SLUICE_ASSIGN_OR_RETURN(Act<T> none, table_->Backward(ctx, dpartial));
  ctx.ReleaseGrads(g_->id());  // the sequence-parallel one's gathered gradient, used
  return none;
}

template <typename T>
VocabParallelHead<T>::VocabParallelHead(model::ModuleBuilder& builder,
                                        std::unique_ptr<model::Linear<T>> head, TensorComm& comm,
                                        bool sequence_parallel)
    : model::Module<T>(builder, head->name() + ".vp"), head_(std::move(head)) {
  if (sequence_parallel) {
    f_ = std::make_unique<GatherFromSequence<T>>(builder, head_->name(), comm);
  } else {
    f_ = std::make_unique<CopyToTensorRegion<T>>(builder, head_->name(), comm);
  }
  this->AddChild(f_.get());
  this->AddChild(head_.get());
}

template <typename T>
Result<Act<T>> VocabParallelHead<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_ASSIGN_OR_RETURN(Act<T> copied, f_->Forward(ctx, x));
  return head_->Forward(ctx, copied);
}

template <typename T>
Result<Act<T>> VocabParallelHead<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_ASSIGN_OR_RETURN(Act<T> dcopied, head_->Backward(ctx, dy));
  return f_->Backward(ctx, dcopied);
}

template <typename T>
VocabParallelCrossEntropy<T>::VocabParallelCrossEntropy(model::ModuleBuilder& builder,
                                                        int64_t columns,
                                                        const ops::VocabShard& shard,
                                                        TensorComm& comm)
    : model::CrossEntropyLoss<T>(builder, columns), shard_(shard), comm_(&comm) {}

// Saved, in order: lse [rows] (the whole vocabulary's), logits (a view), as the whole model's.
template <typename T>
Status VocabParallelCrossEntropy<T>::Forward(ForwardContext<T>& ctx, Act<T> logits,
                                             const int32_t* targets, T* loss) {
  SLUICE_CHECK_EQ(logits.cols, this->vocab());
  const int64_t rows = logits.rows;
  const int64_t pieces = comm_->size();
  SLUICE_ASSIGN_OR_RETURN(T * lse, ctx.AllocateSaved(this->id(), rows));
  ctx.KeepSaved(this->id(), logits.data);
  SLUICE_ASSIGN_OR_RETURN(model::Scratch<T> piece_lse, ctx.AllocateScratch(pieces * rows));
  SLUICE_ASSIGN_OR_RETURN(model::Scratch<T> target_logit, ctx.AllocateScratch(rows));
  T* mine = piece_lse.get() + comm_->rank() * rows;
  SLUICE_RETURN_IF_ERROR(ctx.ops().CrossEntropyShardForward(
      ctx.stream(), {.logits = ctx.View(logits),
                     .targets = {targets, rows},
                     .shard = shard_,
                     .piece_lse = ctx.View(mine, {rows}),
                     .target_logit = ctx.View(target_logit.get(), {rows})}));
  SLUICE_RETURN_IF_ERROR(
      comm_->AllGather(ctx.stream(), piece_lse.get(), rows, "tp.ce.lse lm_head"));
  SLUICE_RETURN_IF_ERROR(
      comm_->AllReduce(ctx.stream(), target_logit.get(), rows, "tp.ce.target lm_head"));
  return ctx.ops().CrossEntropyShardLoss(ctx.stream(),
                                         {.piece_lse = ctx.View(piece_lse.get(), {pieces, rows}),
                                          .target_logit = ctx.View(target_logit.get(), {rows}),
                                          .targets = {targets, rows},
                                          .lse = ctx.View(lse, {rows}),
                                          .loss = ctx.View(loss, {1})});
}

template <typename T>
Result<Act<T>> VocabParallelCrossEntropy<T>::Backward(ForwardContext<T>& ctx,
                                                      const int32_t* targets, double dloss) {
  const auto saved = ctx.Saved(this->id());
  const Act<T> logits{saved[1], ctx.rows(), this->vocab()};
  SLUICE_RETURN_IF_ERROR(
      ctx.ops().CrossEntropyBackward(ctx.stream(), {.logits = ctx.View(logits),
                                                    .targets = {targets, logits.rows},
                                                    .lse = ctx.View(saved[0], {logits.rows}),
                                                    .dloss = dloss,
                                                    .dlogits = ctx.View(logits),
                                                    .shard = shard_}));
  ctx.ReleaseSaved(this->id());
  return logits;
}

template class VocabParallelEmbedding<float>;
template class VocabParallelEmbedding<double>;
template class VocabParallelHead<float>;
template class VocabParallelHead<double>;
template class VocabParallelCrossEntropy<float>;
template class VocabParallelCrossEntropy<double>;

}  // namespace sluice::parallel
