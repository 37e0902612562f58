// The reference global gradient norm over one flat gradient buffer, as DeepSpeed and PyTorch
// define it: the ZeRO engine's sharded norm (engine/zero/shard_grad_norm.h, which also has the
// clip coefficient) must reproduce it bit for bit at one rank, and the tests check that it does.
#pragma once

#include <cstdint>

namespace sluice::train {

struct GradNorm {
  double norm = 0.0;   // L2 norm of the unscaled gradient; inf or NaN when !finite
  bool finite = true;  // false when any element is inf or NaN (an overflow: skip the step)
};

// The L2 norm of grads[i] * inv_scale over `count` elements. Squares are summed in double over
// blocks of zero::kNormBlock elements and the block sums added in block order, so every bit of the
// result is the same for any thread count (0 = OpenMP's default).
GradNorm GlobalGradNorm(const float* grads, int64_t count, double inv_scale, int num_threads);

}  // namespace sluice::train
