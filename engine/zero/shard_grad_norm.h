// The global gradient norm over all shards and ranks, and the clip coefficient.
//
// Each rank sums the squares of the gradient elements it owns (padding excluded) in double, the
// way the reference GlobalGradNorm does (engine/train/grad_clip.cpp): elements in flat order within
// blocks of kNormBlock elements of the model's flat index, block sums added in block order. The
// ranks' sums are then added in rank order (SumInRankOrder), so every rank gets the same bits;
// with one rank the sum is the reference's bit for bit. An inf or NaN anywhere, on any rank, makes
// the sum non-finite on every rank: that is the overflow check.
//
// Under tensor parallelism a rank's sum leaves out the parameters another tensor rank counts
// (NormCounted): the pieces of a split parameter are counted by the rank holding each, a
// parameter replicated across the tensor ranks by tensor rank 0 alone, so that the sum over the
// model-parallel group counts every element of the whole model once. Leaving parameters out keeps
// the others' blocks and order: without tensor parallelism nothing is left out and the bits are
// unchanged.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/zero/shard_layout.h"

namespace sluice::zero {

inline constexpr int64_t kNormBlock = 8192;

// Whether this rank's norm counts each parameter, by registry index; empty: every parameter.
using NormCounted = std::vector<bool>;

// The layout's partitions of the counted parameters by their offset in the model's flat index:
// the order the norm adds in.
std::vector<const PartitionInfo*> PartitionsInFlatOrder(const ShardLayout& layout,
                                                        const NormCounted& counted = {});

// Sum of squares of this rank's owned elements of `grad_shard` (layout.shard_elements()) of the
// counted parameters.
double LocalSquaredSum(const ShardLayout& layout, const float* grad_shard,
                       const NormCounted& counted = {});

// min(1, max_norm / (norm + 1e-6)) as torch.nn.utils.clip_grad_norm_; 1 when max_norm is 0
// (gradient_clipping off) or the norm is not finite.
double ClipCoefficient(double norm, double max_norm);

}  // namespace sluice::zero
