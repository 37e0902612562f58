#include "kernels/cpu/ops_loss.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops_parallel.h"
#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu {
namespace {

void CheckTargets(const int32_t* targets, int64_t rows, int64_t vocab, const char* op) {
  const int64_t bad = FirstInvalidTarget(targets, rows, vocab);
  if (bad >= 0) {
    sluice::kernels::internal::OpsFail(
        op, "target %d at row %lld is outside [0, %lld) and not the ignore index %d", targets[bad],
        (long long)bad, (long long)vocab, kIgnoreIndex);
  }
}

}  // namespace

float CrossEntropyForward(const float* logits, const int32_t* targets, float* lse, int64_t rows,
                          int64_t vocab, int num_threads) {
  CheckTargets(targets, rows, vocab, "CrossEntropyForward");
  const int threads = internal::OpsThreads(num_threads, rows * vocab);
  const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant();
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    if (vec != nullptr) {
      lse[r] = vec->logsumexp_row(row, vocab);
      continue;
    }
    float max = row[0];
#pragma omp simd reduction(max : max)
    for (int64_t v = 1; v < vocab; ++v) max = std::max(max, row[v]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    lse[r] = max + std::log(sum);
  }
  // The mean in row order, in fp64: deterministic whatever the team size.
  double total = 0.0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == kIgnoreIndex) continue;
    total += static_cast<double>(lse[r]) - static_cast<double>(logits[r * vocab + targets[r]]);
    ++count;
  }
  return count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
}

void CrossEntropyBackward(const float* logits, const int32_t* targets, const float* lse,
                          float dloss, float* dlogits, int64_t rows, int64_t vocab,
                          int num_threads) {
  CheckTargets(targets, rows, vocab, "CrossEntropyBackward");
  const int64_t count = CountValidTargets(targets, rows);
  const float scale = count > 0 ? dloss / static_cast<float>(count) : 0.0f;
  const int threads = internal::OpsThreads(num_threads, rows * vocab);
  const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant();
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    float* drow = dlogits + r * vocab;
    const int32_t target = targets[r];
    if (target == kIgnoreIndex) {
      for (int64_t v = 0; v < vocab; ++v) drow[v] = 0.0f;
      continue;
    }
    const float l = lse[r];
    const float p_target = std::exp(row[target] - l);  // read before an aliased drow overwrites it
    if (vec != nullptr) {
      vec->scaled_exp_row(row, l, scale, drow, vocab);
    } else {
#pragma omp simd
      for (int64_t v = 0; v < vocab; ++v) drow[v] = scale * std::exp(row[v] - l);
    }
    drow[target] = scale * (p_target - 1.0f);
  }
}

}  // namespace sluice::kernels::cpu
