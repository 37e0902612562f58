#include "engine/checkpoint/tensor_index.h"

#include <algorithm>

namespace sluice::checkpoint {

Result<TensorIndex> TensorIndex::Build(std::span<const ShardFileReader* const> files) {
  TensorIndex index;
  for (size_t r = 0; r < files.size(); ++r) {
    for (const ShardEntry& e : files[r]->entries()) {
      auto key = std::make_pair(e.kind, e.name);
      auto it = index.by_name_.find(key);
      if (it == index.by_name_.end()) {
        it = index.by_name_.emplace(key, index.tensors_.size()).first;
        TensorSlices slices;
        slices.tensor = ManifestTensor{e.kind, e.name, e.dtype, e.shape};
        index.tensors_.push_back(std::move(slices));
      }
      TensorSlices& t = index.tensors_[it->second];
      if (e.dtype != t.tensor.dtype || !(e.shape == t.tensor.shape)) {
        return DataLossError(
            "tensor '{}': {} (offset {}) says {} {} but another rank's file says {} {}: the "
            "ranks disagree on the tensor",
            e.Label(), files[r]->path().string(), e.table_position, DTypeName(e.dtype),
            e.shape.ToString(), DTypeName(t.tensor.dtype), t.tensor.shape.ToString());
      }
      if (e.elements() > 0) {
        t.slices.push_back(RankSlice{static_cast<int>(r), files[r], &e});
      }
    }
  }
  for (TensorSlices& t : index.tensors_) {
    std::sort(t.slices.begin(), t.slices.end(), [](const RankSlice& a, const RankSlice& b) {
      return a.entry->begin < b.entry->begin;
    });
    const std::string label = fmt::format("{}/{}", StateKindName(t.tensor.kind), t.tensor.name);
    int64_t covered = 0;
    for (const RankSlice& s : t.slices) {
      if (s.entry->begin > covered) {
        return DataLossError(
            "tensor '{}': elements [{}, {}) are held by no rank (next slice: "
            "rank {} in {})",
            label, covered, s.entry->begin, s.rank, s.file->path().string());
      }
      if (s.entry->begin < covered) {
        return DataLossError(
            "tensor '{}': rank {}'s slice [{}, {}) in {} overlaps elements "
            "before {} held by another rank",
            label, s.rank, s.entry->begin, s.entry->end, s.file->path().string(), covered);
      }
      covered = s.entry->end;
    }
    if (covered != t.tensor.shape.numel()) {
      return DataLossError("tensor '{}': elements [{}, {}) are held by no rank", label, covered,
                           t.tensor.shape.numel());
    }
  }
  return index;
}

const TensorSlices* TensorIndex::Find(StateKind kind, std::string_view name) const {
  auto it = by_name_.find(std::make_pair(kind, std::string(name)));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace sluice::checkpoint
