// Megatron tensor parallelism applied to a model as it is built (after torchtitan's
// `parallelize`): the layer code builds whatever its registry and wrappers give it, and this plan
// decides both.
//
// What each tensor rank holds (ShardingOf, the registry's sharding rule), by Hugging Face name:
//   column-parallel, split along the output (weight dim 0, bias too): attn.c_attn (GPT-2's fused
//     q/k/v rows split per q, k and v, so a rank holds its own heads of each), self_attn.q_proj,
//     k_proj, v_proj (shared by groups of ranks when there are fewer key/value heads than ranks),
//     mlp.c_fc, mlp.gate_proj, mlp.up_proj;
//   row-parallel, split along the input (weight dim 1): attn.c_proj, self_attn.o_proj,
//     mlp.c_proj, mlp.down_proj; their bias is replicated, and only tensor rank 0 adds it to its
//     partial sum (the others leave it out, Linear::OmitBiasInForward), so the sum adds it once
//     and every rank computes the same bias gradient;
//   vocabulary-parallel, split along the vocabulary (dim 0) in pieces as even as possible:
//     transformer.wte, model.embed_tokens, lm_head (GPT-2's tied head reads the split table);
//   everything else replicated: position table, norms.
// Heads split over the ranks: n_head and d_ff must divide by the size, and n_kv_head must divide
// by it or divide it (ValidateModelOptions). With fewer key/value heads than ranks, Llama's
// k_proj and v_proj are split into one head per piece, each piece shared by the size / n_kv_head
// consecutive ranks whose query heads use it (Megatron's replication; tensor_layout.h): a rank
// holds n_head / size query heads and a copy of their one key/value head. Each holder's gradient
// of the shared piece is its own query heads' part, summed over the share group before the
// data-parallel reduction (TensorSharding::shared, sequence_parallel_grads.h); the input gradient
// needs nothing more: f's backward all-reduce sums every rank's part already.
//
// What runs (Parallelize): each decoder block's attention and MLP are wrapped in a
// TensorParallelRegion, f before and g after (tensor_region.h): per block and pass two
// all-reduces in the forward (g) and two in the backward (f), each of [rows, d_model]. The
// token embedding, LM head and loss are the vocabulary-parallel ones of tensor_vocab.h: one
// all-reduce of [rows, d_model] after the embedding (forward) and one before the head
// (backward), an all-gather of [tensor size, rows] and an all-reduce of [rows] in the loss; no
// rank ever holds more than its piece of the logits.
//
// Sequence parallelism (ModelOptions::sequence_parallel; Megatron-SP, parallelism-study.md §3):
// between the regions the residual stream holds only this rank's slice of the rows (the
// contiguous rows [r * rows / t, (r + 1) * rows / t) of the [batch * seq, d_model] activations:
// Megatron's split along the sequence, for the row-wise norms and residual adds that run there;
// sequence_region.h). Each region is an all-gather of the rows, the sublayer, a reduce-scatter
// of its partial sums ("tp.ag" and "tp.rs", each once per region and direction: the bytes of the
// all-reduces they replace); the gathered input is freed after the sublayer's forward and gathered
// again for its backward ("tp.regather", Megatron's trade of one all-gather for the memory). The
// embeddings' output is split: Llama's vocabulary-parallel embedding reduce-scatters instead of
// all-reducing; GPT-2's, whose learned positions are added to the whole rows, all-reduces, adds
// them and keeps its rows (Megatron does the same with learned positions); a replicated embedding
// keeps its rows. The final norm runs on the slice, and the head's input is gathered ("tp.ag
// lm_head"; backward "tp.rs lm_head"): the loss then sees whole rows, as without sequence
// parallelism, and the logits stay split over the vocabulary. Pipeline stages pass whole rows: a
// later stage's first unit keeps its rows of the input, an earlier stage's last unit gathers its
// output (ParallelizeSequence). The norms' weights and biases see only their rank's rows, so their
// gradients are partial sums (TensorSharding::partial_grad), summed over the tensor ranks by
// ReduceSequenceParallelGrads (sequence_parallel_grads.h); every other replicated parameter
// (positions, row-parallel biases, a replicated table or head) is computed on whole rows and needs
// nothing. Without kernels for a piece of the vocabulary (the cuda backend, so far:
// OpsBackend::SupportsVocabShards) the embedding, head and loss stay replicated, as in the
// whole model.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/model/cross_entropy.h"
#include "engine/model/decoder_block.h"
#include "engine/model/embedding.h"
#include "engine/model/linear.h"
#include "engine/model/model_options.h"
#include "engine/model/module.h"
#include "engine/parallel/tensor_comm.h"
#include "engine/parallel/tensor_layout.h"
#include "engine/parallel/tensor_sharding.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::parallel {

class TensorParallelPlan {
 public:
  // For options.tensor_parallel_size > 1 (ValidateModelOptions'd). Collective over `tensor`,
  // which must have tensor_parallel_size ranks, this one being tensor_parallel_rank (else
  // InvalidArgument naming both); the plan keeps its own copy of it (tensor_comm.h), its comm
  // stream on `device`.
  // `vocab_parallel`: split the vocabulary (InvalidArgument when it has fewer ids than ranks).
  static Result<std::unique_ptr<TensorParallelPlan>> Create(const model::ModelOptions& options,
                                                            Comm& tensor, Device& device,
                                                            bool vocab_parallel = true);

  int64_t size() const { return size_; }
  int64_t rank() const { return rank_; }
  TensorComm& comm() const { return *comm_; }
  bool vocab_parallel() const { return vocab_parallel_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // This rank's ids of the vocabulary (vocab_parallel()).
  const ops::VocabShard& vocab_shard() const { return vocab_shard_; }

  // The layout over the tensor ranks of parameter `name` of global shape `global`.
  TensorSharding ShardingOf(std::string_view name, const Shape& global) const;

  // Wraps the block's attention and MLP in their tensor-parallel regions and leaves the
  // row-parallel biases to tensor rank 0. Build time, once per block, with the model's builder.
  template <typename T>
  void Parallelize(model::DecoderBlock<T>& block, model::ModuleBuilder& builder) const;

  // With vocab_parallel(), build time: the token embedding becomes the vocabulary-parallel one;
  // the LM head (built on its piece of the weight) is wrapped with f; the loss is the
  // vocabulary-parallel cross-entropy over the head's `columns`.
  template <typename T>
  void Parallelize(model::Embeddings<T>& embeddings, model::ModuleBuilder& builder) const;
  template <typename T>
  std::unique_ptr<model::Module<T>> ParallelizeHead(std::unique_ptr<model::Linear<T>> head,
                                                    model::ModuleBuilder& builder) const;
  template <typename T>
  std::unique_ptr<model::CrossEntropyLoss<T>> MakeLoss(model::ModuleBuilder& builder,
                                                       int64_t columns) const;

  // With sequence_parallel(), build time, after the stage's units are built (and parallelized):
  // wraps those whose input or output is whole rows in a SequenceParallelUnit (the embeddings
  // unless they reduce-scatter, the first unit of a stage after the first, the last unit of a
  // stage before the last, a replicated head), replacing them in `units`. `embeddings` and
  // `head` are the stage's, or null. Returns the wrappers, which the caller owns.
  template <typename T>
  std::vector<std::unique_ptr<model::Module<T>>> ParallelizeSequence(
      std::vector<model::Module<T>*>& units, const model::Module<T>* embeddings,
      const model::Module<T>* head, bool first_stage, bool last_stage,
      model::ModuleBuilder& builder) const;

 private:
  TensorParallelPlan(const model::ModelOptions& options, std::unique_ptr<TensorComm> comm,
                     bool vocab_parallel);

  int64_t size_;
  int64_t rank_;
  bool vocab_parallel_;
  bool sequence_parallel_;
  bool learned_positions_;  // GPT-2's wpe: added to the embeddings' whole rows
  ops::VocabShard vocab_shard_;
  TensorLayout layout_;  // what ShardingOf answers (tensor_layout.h)
  std::unique_ptr<TensorComm> comm_;
};

}  // namespace sluice::parallel
