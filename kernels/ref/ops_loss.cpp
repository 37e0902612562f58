#include "kernels/ref/ops_loss.h"

#include <cmath>

#include "kernels/ref/ops_common.h"

namespace sluice::kernels {

int64_t CountValidTargets(const int32_t* targets, int64_t rows) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += targets[r] != kIgnoreIndex ? 1 : 0;
  return count;
}

int64_t FirstInvalidTarget(const int32_t* targets, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] != kIgnoreIndex && (targets[r] < 0 || targets[r] >= vocab)) return r;
  }
  return -1;
}

}  // namespace sluice::kernels

namespace sluice::kernels::ref {
namespace {

void CheckTargets(const int32_t* targets, int64_t rows, int64_t vocab, const char* op) {
  const int64_t bad = FirstInvalidTarget(targets, rows, vocab);
  if (bad >= 0) {
    internal::OpsFail(op, "target %d at row %lld is outside [0, %lld) and not the ignore index %d",
                      targets[bad], (long long)bad, (long long)vocab, kIgnoreIndex);
  }
}

}  // namespace

template <typename T>
T CrossEntropyForward(const T* logits, const int32_t* targets, T* lse, int64_t rows,
                      int64_t vocab) {
  CheckTargets(targets, rows, vocab, "CrossEntropyForward");
  T total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * vocab;
    T max = row[0];
    for (int64_t v = 1; v < vocab; ++v) max = row[v] > max ? row[v] : max;
    T sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    lse[r] = max + std::log(sum);
    if (targets[r] == kIgnoreIndex) continue;
    total += lse[r] - row[targets[r]];
    ++count;
  }
  return count > 0 ? total / static_cast<T>(count) : T(0);
}

template <typename T>
void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                          T* dlogits, int64_t rows, int64_t vocab) {
  CheckTargets(targets, rows, vocab, "CrossEntropyBackward");
  const int64_t count = CountValidTargets(targets, rows);
  const T scale = count > 0 ? dloss / static_cast<T>(count) : T(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t target = targets[r];
    for (int64_t v = 0; v < vocab; ++v) {
      const int64_t i = r * vocab + v;
      if (target == kIgnoreIndex) {
        dlogits[i] = 0;
        continue;
      }
      const T p = std::exp(logits[i] - lse[r]);
      dlogits[i] = scale * (v == target ? p - T(1) : p);
    }
  }
}

#define SLUICE_INSTANTIATE(T)                                                               \
  template T CrossEntropyForward<T>(const T*, const int32_t*, T*, int64_t, int64_t);        \
  template void CrossEntropyBackward<T>(const T*, const int32_t*, const T*, T, T*, int64_t, \
                                        int64_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
