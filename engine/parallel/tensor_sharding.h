// How one parameter is laid out over the tensor-parallel ranks: its global identity.
//
// A parameter is either whole on this rank (degree 1: no tensor parallelism, or one copy per
// tensor rank: `replicated()`), or split along one dimension into `degree` equal pieces of which
// this rank holds piece `rank` (`split()`: Megatron's column-parallel weights are split along
// dim 0, the row-parallel ones along dim 1). A fused parameter whose dimension concatenates
// separately split blocks (GPT-2's c_attn rows: q, then k, then v) lists the blocks' sizes:
// each block is split on its own and the rank's pieces are concatenated in block order, so the
// rank holds [q_r; k_r; v_r], its own heads of each.
//
// A dimension split in one block need not divide by the degree (the vocabulary of the token
// table and LM head: GPT-2's 50257 ids): its pieces are then as even as possible, the first
// (size % degree) of them one longer (SplitTensorBalanced), so there are no padding rows, and
// the global shape is the model's own.
//
// A piece may be shared: held by `replicas` consecutive tensor ranks (its share group), as
// grouped-query attention's key/value projections are when there are fewer key/value heads than
// tensor ranks (tensor_layout.h). Each holder's gradient is then a partial sum (partial_grad),
// and the first holder (`replica` 0) counts the piece in the norm and saves it.
//
// Element e of the local tensor (row-major) is element GlobalIndex(e) of the global tensor, the
// one a model without tensor parallelism holds. Initialization and checkpoints go through it, so
// the rank's weights are bit for bit the slices of the whole model's (init.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/tensor.h"

namespace sluice::parallel {

struct TensorSharding {
  Shape global_shape;
  int dim = -1;        // the split dimension; -1: not split
  int64_t degree = 1;  // split: pieces; not split: tensor ranks holding a copy of the whole
  int64_t rank = 0;    // split: the piece this rank holds
  std::vector<int64_t> blocks;  // sizes along `dim` of the blocks split separately; empty: one
  // Split: the consecutive tensor ranks holding this same piece (its share group; 1: this rank
  // alone), and this rank's place among them (0 counts and saves the piece).
  int64_t replicas = 1;
  int64_t replica = 0;
  // Each holder's gradient is a partial sum: sum it over the ranks holding the same elements (the
  // tensor group when replicated, the share group when shared) before use. A norm's weight under
  // sequence parallelism (each rank's own tokens, tensor_plan.h); a shared key/value piece (each
  // rank's own query heads). ReduceSequenceParallelGrads, sequence_parallel_grads.h.
  bool partial_grad = false;

  bool split() const { return dim >= 0 && degree > 1; }
  bool replicated() const { return dim < 0 && degree > 1; }
  bool shared() const { return split() && replicas > 1; }
  // Whether tensor rank `tensor_rank` (the one holding this layout) is the first of the ranks
  // holding these elements, the one that counts them in the gradient norm and saves them: each
  // piece's first holder; tensor rank 0 for a replicated tensor.
  bool FirstHolder(int64_t tensor_rank) const {
    if (split()) return replica == 0;
    // Whole on every tensor rank, marked replicated or not (a model built without tensor
    // parallelism on a grid that has it).
    return tensor_rank == 0;
  }
  // The shape this rank holds.
  Shape LocalShape() const;
  // Split in one block: where this rank's piece starts along `dim`, and its length.
  int64_t PieceStart() const;
  int64_t PieceSize() const;
  // The global row-major index of local row-major element `local`.
  int64_t GlobalIndex(int64_t local) const;
  // "split dim 0 of [96, 32] 2 ways, piece 1 (blocks 32+32+32)", "split dim 0 of [8, 32] 2
  // ways, piece 1, shared by 2 ranks (replica 0), partial gradients", "replicated on 2 ranks",
  // "replicated on 2 ranks, partial gradients", "whole".
  std::string ToString() const;
};

// The parameter of a model without tensor parallelism.
TensorSharding WholeTensor(const Shape& global);
// A copy of the whole tensor on each of `degree` tensor ranks.
TensorSharding ReplicatedTensor(const Shape& global, int64_t degree);
// `global` split along `dim` into `degree` pieces, this rank's being `rank`; `blocks` as above
// (empty: the whole dimension is one block). InvalidArgument naming the shape when a block does
// not divide by the degree or the blocks do not add up to the dimension.
Result<TensorSharding> SplitTensor(const Shape& global, int dim, int64_t degree, int64_t rank,
                                   std::vector<int64_t> blocks = {});
// `global` split along `dim` into `pieces` equal pieces, each shared by tensor_size / pieces
// consecutive tensor ranks, with partial gradients; tensor rank `tensor_rank` holds piece
// tensor_rank / (tensor_size / pieces). One piece: the whole tensor replicated on tensor_size
// ranks, partial gradients. InvalidArgument naming the shape when pieces does not divide
// tensor_size or the dimension.
Result<TensorSharding> SplitTensorShared(const Shape& global, int dim, int64_t pieces,
                                         int64_t tensor_size, int64_t tensor_rank);
// `global` split along `dim` in one block into `degree` pieces as even as possible (the first
// size % degree one longer), this rank's being `rank`. InvalidArgument naming the shape when the
// dimension is shorter than the degree (a piece would be empty).
Result<TensorSharding> SplitTensorBalanced(const Shape& global, int dim, int64_t degree,
                                           int64_t rank);

}  // namespace sluice::parallel
