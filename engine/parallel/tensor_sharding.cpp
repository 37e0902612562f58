#include "engine/parallel/tensor_sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "runtime/check.h"

namespace sluice::parallel {
namespace {

// The sizes of the blocks of `dim`: the listed ones, or the whole dimension.
std::vector<int64_t> BlocksOf(const TensorSharding& s) {
  if (!s.blocks.empty()) return s.blocks;
  return {s.global_shape.dim(s.dim)};
}

}  // namespace

Shape TensorSharding::LocalShape() const {
  if (!split()) return global_shape;
  std::vector<int64_t> dims(global_shape.dims().begin(), global_shape.dims().end());
  dims[dim] = blocks.empty() ? PieceSize() : dims[dim] / degree;
  return Shape(std::span<const int64_t>(dims));
}

// One block: pieces of size / degree, the first size % degree of them one longer (equal pieces
// when the size divides).
int64_t TensorSharding::PieceStart() const {
  SLUICE_CHECK(split() && blocks.empty()) << "the piece start of " << ToString();
  const int64_t size = global_shape.dim(dim);
  return rank * (size / degree) + std::min(rank, size % degree);
}

int64_t TensorSharding::PieceSize() const {
  SLUICE_CHECK(split() && blocks.empty()) << "the piece size of " << ToString();
  const int64_t size = global_shape.dim(dim);
  return size / degree + (rank < size % degree ? 1 : 0);
}

int64_t TensorSharding::GlobalIndex(int64_t local) const {
  if (!split()) return local;
  const Shape shape = LocalShape();
  // Row-major: local = (outer * local_dim + i) * inner + inner_index.
  int64_t inner = 1;
  for (int d = dim + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  const int64_t local_dim = shape.dim(dim);
  const int64_t inner_index = local % inner;
  const int64_t i = (local / inner) % local_dim;
  const int64_t outer = local / inner / local_dim;
  if (blocks.empty()) {
    return (outer * global_shape.dim(dim) + PieceStart() + i) * inner + inner_index;
  }
  // i falls in block b at offset o of that block's piece; the global row is the block's start
  // plus this rank's piece start plus o.
  int64_t local_start = 0;
  int64_t global_start = 0;
  int64_t global_i = -1;
  for (const int64_t block : BlocksOf(*this)) {
    const int64_t piece = block / degree;
    if (i < local_start + piece) {
      global_i = global_start + rank * piece + (i - local_start);
      break;
    }
    local_start += piece;
    global_start += block;
  }
  SLUICE_CHECK_GE(global_i, 0) << "local element " << local << " of " << ToString();
  return (outer * global_shape.dim(dim) + global_i) * inner + inner_index;
}

std::string TensorSharding::ToString() const {
  if (replicated()) {
    return fmt::format("replicated on {} ranks{}", degree,
                       partial_grad ? ", partial gradients" : "");
  }
  if (!split()) return "whole";
  std::string text = fmt::format("split dim {} of {} {} ways, piece {}", dim,
                                 global_shape.ToString(), degree, rank);
  if (!blocks.empty()) text += fmt::format(" (blocks {})", fmt::join(blocks, "+"));
  if (shared()) text += fmt::format(", shared by {} ranks (replica {})", replicas, replica);
  if (partial_grad) text += ", partial gradients";
  return text;
}

TensorSharding WholeTensor(const Shape& global) {
  TensorSharding s;
  s.global_shape = global;
  return s;
}

TensorSharding ReplicatedTensor(const Shape& global, int64_t degree) {
  TensorSharding s = WholeTensor(global);
  s.degree = degree;
  return s;
}

Result<TensorSharding> SplitTensor(const Shape& global, int dim, int64_t degree, int64_t rank,
                                   std::vector<int64_t> blocks) {
  if (dim < 0 || dim >= global.rank()) {
    return InvalidArgumentError("cannot split dimension {} of a tensor of shape {}", dim,
                                global.ToString());
  }
  if (degree < 1 || rank < 0 || rank >= degree) {
    return InvalidArgumentError("piece {} of {} of a tensor of shape {} does not exist", rank,
                                degree, global.ToString());
  }
  TensorSharding s;
  s.global_shape = global;
  s.dim = dim;
  s.degree = degree;
  s.rank = rank;
  s.blocks = std::move(blocks);
  int64_t total = 0;
  for (const int64_t block : BlocksOf(s)) {
    if (block % degree != 0) {
      return InvalidArgumentError(
          "dimension {} of a tensor of shape {} has a block of {} that does not split into {} "
          "equal pieces",
          dim, global.ToString(), block, degree);
    }
    total += block;
  }
  if (total != global.dim(dim)) {
    return InvalidArgumentError("blocks {} do not add up to dimension {} of shape {}",
                                fmt::join(s.blocks, "+"), dim, global.ToString());
  }
  if (degree == 1) s.dim = -1;  // one piece: the whole tensor
  return s;
}

Result<TensorSharding> SplitTensorShared(const Shape& global, int dim, int64_t pieces,
                                         int64_t tensor_size, int64_t tensor_rank) {
  if (pieces < 1 || tensor_size < 1 || tensor_size % pieces != 0) {
    return InvalidArgumentError(
        "a tensor of shape {} cannot be shared over {} tensor ranks in {} pieces: each piece "
        "needs a whole group of ranks",
        global.ToString(), tensor_size, pieces);
  }
  if (tensor_rank < 0 || tensor_rank >= tensor_size) {
    return InvalidArgumentError("tensor rank {} of {} does not exist (a tensor of shape {})",
                                tensor_rank, tensor_size, global.ToString());
  }
  const int64_t replicas = tensor_size / pieces;
  TensorSharding s;
  if (pieces == 1) {
    s = ReplicatedTensor(global, tensor_size);
  } else {
    SLUICE_ASSIGN_OR_RETURN(s, SplitTensor(global, dim, pieces, tensor_rank / replicas));
    s.replicas = replicas;
    s.replica = tensor_rank % replicas;
  }
  s.partial_grad = replicas > 1;
  return s;
}

Result<TensorSharding> SplitTensorBalanced(const Shape& global, int dim, int64_t degree,
                                           int64_t rank) {
  if (dim < 0 || dim >= global.rank() || degree < 1 || rank < 0 || rank >= degree) {
    return SplitTensor(global, dim, degree, rank);  // its error names what does not exist
  }
  if (global.dim(dim) < degree) {
    return InvalidArgumentError(
        "dimension {} of a tensor of shape {} is shorter than the {} pieces it would split into",
        dim, global.ToString(), degree);
  }
  TensorSharding s;
  s.global_shape = global;
  s.dim = degree == 1 ? -1 : dim;
  s.degree = degree;
  s.rank = rank;
  return s;
}

}  // namespace sluice::parallel
