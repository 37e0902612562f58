// Where each tensor of a checkpoint lives: the slices the ranks' shard files hold, checked to
// agree (dtype, full shape) and to cover the flattened tensor exactly once.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_reader.h"

namespace sluice::checkpoint {

struct RankSlice {
  int rank = 0;
  const ShardFileReader* file = nullptr;
  const ShardEntry* entry = nullptr;
};

struct TensorSlices {
  ManifestTensor tensor;
  std::vector<RankSlice> slices;  // non-empty slices, ascending begin, contiguous from 0 to numel
};

class TensorIndex {
 public:
  // `files[r]` is rank r's file of one group. DataLoss naming the tensor, the ranks and files
  // when two ranks disagree on a dtype or shape, when slices overlap or when part of a tensor is
  // held by no rank.
  static Result<TensorIndex> Build(std::span<const ShardFileReader* const> files);

  // In order of first appearance (rank 0's order first).
  const std::vector<TensorSlices>& tensors() const { return tensors_; }
  const TensorSlices* Find(StateKind kind, std::string_view name) const;

 private:
  std::vector<TensorSlices> tensors_;
  std::map<std::pair<StateKind, std::string>, size_t, std::less<>> by_name_;
};

}  // namespace sluice::checkpoint
