// A tensor-parallel rank's elements of a parameter in the whole (global) tensor's terms: how
// checkpoints store global slices, so that a run saved at one tensor-parallel size resumes at
// another (engine/train/checkpointing.cpp).
//
// The local elements [begin, end) of a parameter (row-major in its local shape) are runs of
// consecutive local elements that are consecutive in the global tensor too: one run for a whole
// or replicated parameter; for a split one a run ends where the rank's piece of a block along
// the split dimension ends (a column-parallel weight: one run per block; a row-parallel one: one
// per row).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/parallel/tensor_sharding.h"

namespace sluice::parallel {

struct GlobalRun {
  int64_t local_begin = 0;
  int64_t global_begin = 0;
  int64_t count = 0;
  bool operator==(const GlobalRun&) const = default;
};

// The runs of local elements [begin, end) of a parameter laid out as `sharding` says, in local
// order (empty when begin == end).
std::vector<GlobalRun> GlobalRunsOf(const TensorSharding& sharding, int64_t begin, int64_t end);

}  // namespace sluice::parallel
