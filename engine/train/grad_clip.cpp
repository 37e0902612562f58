#include "engine/train/grad_clip.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/zero/shard_grad_norm.h"

namespace sluice::train {

using zero::kNormBlock;  // fixed, not derived from the team size: the order must not depend on it

GradNorm GlobalGradNorm(const float* grads, int64_t count, double inv_scale, int num_threads) {
  const int64_t blocks = (count + kNormBlock - 1) / kNormBlock;
  std::vector<double> sums(static_cast<size_t>(blocks), 0.0);
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
#pragma omp parallel for num_threads(threads) if (threads > 1 && blocks > 1) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kNormBlock;
    const int64_t end = std::min(count, begin + kNormBlock);
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const double g = grads[i];
      sum += g * g;
    }
    sums[static_cast<size_t>(b)] = sum;
  }
  double total = 0.0;
  for (double s : sums) total += s;
  GradNorm result;
  // A finite fp32 value squared cannot overflow a double, so a non-finite total means an inf or
  // NaN gradient.
  result.finite = std::isfinite(total);
  result.norm = std::sqrt(total) * inv_scale;
  return result;
}

}  // namespace sluice::train
