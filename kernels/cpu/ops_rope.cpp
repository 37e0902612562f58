#include "kernels/cpu/ops_rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/ops_parallel.h"

namespace sluice::kernels::cpu {
namespace {

// sign +1 rotates by +angle (forward), -1 by -angle (backward).
void Rotate(const float* x, float* y, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
            float theta, float sign, int num_threads, const char* op) {
  if (head_dim % 2 != 0) {
    sluice::kernels::internal::OpsFail(op, "head_dim = %lld is odd", (long long)head_dim);
  }
  const int64_t half = head_dim / 2;
  // cos and sin for [seq, half], as the reference rounds them.
  std::vector<float> cos_table(seq * half);
  std::vector<float> sin_table(seq * half);
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq =
        std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
    for (int64_t t = 0; t < seq; ++t) {
      const double angle = static_cast<double>(t) * inv_freq;
      cos_table[t * half + i] = static_cast<float>(std::cos(angle));
      sin_table[t * half + i] = sign * static_cast<float>(std::sin(angle));
    }
  }
  const int64_t tokens = batch * seq;
  const int threads = internal::OpsThreads(num_threads, tokens * heads * head_dim);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t token = 0; token < tokens; ++token) {
    const int64_t t = token % seq;
    const float* c = cos_table.data() + t * half;
    const float* s = sin_table.data() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = x + (token * heads + h) * head_dim;
      float* yh = y + (token * heads + h) * head_dim;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float lo = xh[i];
        const float hi = xh[i + half];
        yh[i] = lo * c[i] - hi * s[i];
        yh[i + half] = hi * c[i] + lo * s[i];
      }
    }
  }
}

}  // namespace

void RopeForward(const float* x, float* y, int64_t batch, int64_t seq, int64_t heads,
                 int64_t head_dim, float theta, int num_threads) {
  Rotate(x, y, batch, seq, heads, head_dim, theta, 1.0f, num_threads, "RopeForward");
}

void RopeBackward(const float* dy, float* dx, int64_t batch, int64_t seq, int64_t heads,
                  int64_t head_dim, float theta, int num_threads) {
  Rotate(dy, dx, batch, seq, heads, head_dim, theta, -1.0f, num_threads, "RopeBackward");
}

}  // namespace sluice::kernels::cpu
