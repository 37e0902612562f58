#include "kernels/cpu/ops_activation.h"

#include <cmath>

#include "kernels/cpu/ops_parallel.h"
#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

}  // namespace

void GeluForward(const float* x, float* y, int64_t n, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, n);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
    internal::ParallelChunks(n, threads,
                             [&](int64_t b, int64_t e) { vec->gelu_forward(x + b, y + b, e - b); });
    return;
  }
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(kGeluC * (v + kGeluA * v * v * v)));
  }
}

void GeluBackward(const float* x, const float* dy, float* dx, int64_t n, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, n);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
    internal::ParallelChunks(n, threads, [&](int64_t b, int64_t e) {
      vec->gelu_backward(x + b, dy + b, dx + b, e - b);
    });
    return;
  }
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = std::tanh(kGeluC * (v + kGeluA * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

void SwiGluForward(const float* gate, const float* up, float* y, int64_t n, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, n);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
    internal::ParallelChunks(n, threads, [&](int64_t b, int64_t e) {
      vec->swiglu_forward(gate + b, up + b, y + b, e - b);
    });
    return;
  }
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void SwiGluBackward(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                    int64_t n, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, n);
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
    internal::ParallelChunks(n, threads, [&](int64_t b, int64_t e) {
      vec->swiglu_backward(gate + b, up + b, dy + b, dgate + b, dup + b, e - b);
    });
    return;
  }
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = 1.0f / (1.0f + std::exp(-g));
    const float u = up[i];
    const float d = dy[i];
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    dup[i] = d * g * s;
  }
}

}  // namespace sluice::kernels::cpu
