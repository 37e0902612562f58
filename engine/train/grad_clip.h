// Global gradient norm and the clip coefficient, as DeepSpeed and PyTorch define them. The
// coefficient is not applied to the gradients here: it is folded, with the loss-scale inverse,
// into the Adam kernel's single grad_scale, so the gradients are read once.
#pragma once

#include <cstdint>

namespace sluice::train {

struct GradNorm {
  double norm = 0.0;   // L2 norm of the unscaled gradient; inf or NaN when !finite
  bool finite = true;  // false when any element is inf or NaN (an overflow: skip the step)
};

// The L2 norm of grads[i] * inv_scale over `count` elements. Squares are summed in double over
// fixed blocks and the block sums added in block order, so every bit of the result is the same
// for any thread count (0 = OpenMP's default).
GradNorm GlobalGradNorm(const float* grads, int64_t count, double inv_scale, int num_threads);

// min(1, max_norm / (norm + 1e-6)), torch.nn.utils.clip_grad_norm_'s factor; 1 when max_norm is
// 0 (gradient_clipping off) or the norm is not finite.
double ClipCoefficient(double norm, double max_norm);

}  // namespace sluice::train
