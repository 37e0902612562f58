// The vocabulary split over the tensor ranks (Megatron's VocabParallelEmbedding, the LM head
// column-parallel over the vocabulary, and a cross-entropy that never gathers the logits), as the
// tensor-parallel plan applies them (tensor_plan.h). Each rank holds the ids [start, start + n)
// of the vocabulary (TensorSharding::PieceStart/PieceSize of the table: pieces as even as
// possible, so a vocabulary that does not divide by the tensor size needs no padding rows):
//   VocabParallelEmbedding: the token embedding of its piece of the table (ids outside it look up
//     zeros), then g: the all-reduce of [rows, d_model] sums the pieces. Backward: the identity
//     through g; each rank accumulates the gradient rows of its own ids only (in token order, no
//     atomics);
//   VocabParallelHead: f, then the LM head's piece [n, d_model] (tied GPT-2 heads read the split
//     table): logits [rows, n]. Backward: the head, then f's all-reduce of the input gradient;
//   VocabParallelCrossEntropy: per row, the piece's log-sum-exp and (on the rank holding the
//     target) the target's logit; an all-gather of the log-sum-exps ([tensor size, rows]) and an
//     all-reduce of the target logits ([rows]) give every rank the whole vocabulary's log-sum-exp
//     and the loss (flash-attn's tensor-parallel cross-entropy; Megatron all-reduces the maximum
//     instead, which needs a max reduction the communicators do not offer). Backward: each rank's
//     slice of softmax - onehot, with no communication. Ignored targets count and weigh as in the
//     whole model's loss.
// The collectives run on the plan's comm stream, ordered by events (tensor_comm.h); the trace
// names them "tp.g <table>", "tp.f lm_head", "tp.ce.lse lm_head" and "tp.ce.target lm_head".
// With sequence parallelism (sequence_region.h) the embedding may end in a reduce-scatter of the
// rows instead of g ("tp.rs <table>"; backward "tp.ag <table>"), and the head's input arrives as
// this rank's rows: f becomes their all-gather ("tp.ag lm_head"; backward "tp.rs lm_head"). The
// loss sees the whole rows, as without it.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/model/cross_entropy.h"
#include "engine/model/embedding.h"
#include "engine/model/linear.h"
#include "engine/model/module.h"
#include "engine/parallel/tensor_comm.h"
#include "engine/parallel/tensor_region.h"
#include "runtime/ops/ops_backend.h"

namespace sluice::parallel {

template <typename T>
class VocabParallelEmbedding final : public model::Module<T> {
 public:
  // `table` holds the rows of `shard` (the registry gave it that piece). `reduce_scatter`: the
  // output is this rank's rows of the sum (sequence parallelism), not all of them.
  VocabParallelEmbedding(model::ModuleBuilder& builder,
                         std::unique_ptr<model::TokenEmbedding<T>> table,
                         const ops::VocabShard& shard, TensorComm& comm,
                         bool reduce_scatter = false);

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

 private:
  std::unique_ptr<model::TokenEmbedding<T>> table_;
  std::unique_ptr<model::Module<T>> g_;  // or the reduce-scatter
};

template <typename T>
class VocabParallelHead final : public model::Module<T> {
 public:
  // `sequence_parallel`: the input is this rank's rows, gathered before the head.
  VocabParallelHead(model::ModuleBuilder& builder, std::unique_ptr<model::Linear<T>> head,
                    TensorComm& comm, bool sequence_parallel = false);

  Result<model::Act<T>> Forward(model::ForwardContext<T>& ctx, model::Act<T> x) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, model::Act<T> dy) override;

 private:
  std::unique_ptr<model::Module<T>> f_;  // or the all-gather
  std::unique_ptr<model::Linear<T>> head_;
};

template <typename T>
class VocabParallelCrossEntropy final : public model::CrossEntropyLoss<T> {
 public:
  // Logits of shard.vocab ids, of which this rank's have the columns of `shard` (`columns`).
  VocabParallelCrossEntropy(model::ModuleBuilder& builder, int64_t columns,
                            const ops::VocabShard& shard, TensorComm& comm);

  Status Forward(model::ForwardContext<T>& ctx, model::Act<T> logits, const int32_t* targets,
                 T* loss) override;
  Result<model::Act<T>> Backward(model::ForwardContext<T>& ctx, const int32_t* targets,
                                 double dloss) override;

 private:
  ops::VocabShard shard_;
  TensorComm* comm_;
};

extern template class VocabParallelEmbedding<float>;
extern template class VocabParallelEmbedding<double>;
extern template class VocabParallelHead<float>;
extern template class VocabParallelHead<double>;
extern template class VocabParallelCrossEntropy<float>;
extern template class VocabParallelCrossEntropy<double>;

}  // namespace sluice::parallel
