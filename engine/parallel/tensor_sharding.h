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
  // Replicated, but each tensor rank's gradient is a partial sum over its own tokens (a norm's
  // weight under sequence parallelism, tensor_plan.h): sum it over the tensor group before use
  // (ReduceSequenceParallelGrads, sequence_parallel_grads.h).
  bool partial_grad = false;

  bool split() const { return dim >= 0 && degree > 1; }
  bool replicated() const { return dim < 0 && degree > 1; }
  // The shape this rank holds.
  Shape LocalShape() const;
  // Split in one block: where this rank's piece starts along `dim`, and its length.
  int64_t PieceStart() const;
  int64_t PieceSize() const;
  // The global row-major index of local row-major element `local`.
  int64_t GlobalIndex(int64_t local) const;
  // "split dim 0 of [96, 32] 2 ways, piece 1 (blocks 32+32+32)", "replicated on 2 ranks",
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
// `global` split along `dim` in one block into `degree` pieces as even as possible (the first
// size % degree one longer), this rank's being `rank`. InvalidArgument naming the shape when the
// dimension is shorter than the degree (a piece would be empty).
Result<TensorSharding> SplitTensorBalanced(const Shape& global, int dim, int64_t degree,
                                           int64_t rank);

}  // namespace sluice::parallel
