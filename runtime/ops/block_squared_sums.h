// The blocked sum of squares of the gradient norm (OpsBackend::BlockSquaredSums) on host memory,
// written once for the host columns of the ops table and for the offloaded optimizer's host
// gradient shard (engine/zero/shard_norm_plan.h): out[j] = the sum of double(x[i])^2 over the
// pieces of block j, one element after another in piece order. Blocks are spread over `threads`
// threads (0: OpenMP's default), each block summed by one: the bits do not depend on the team.
#pragma once

#include <cstdint>

#include "runtime/ops/ops_backend.h"

namespace sluice::ops {

void BlockSquaredSumsOnHost(const float* x, const BlockSumList& list, double* out, int threads);

}  // namespace sluice::ops
