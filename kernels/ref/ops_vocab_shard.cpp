#include "kernels/ref/ops_vocab_shard.h"

#include <cmath>

#include "kernels/ref/ops_loss.h"

namespace sluice::kernels::ref {
namespace {

// The row of the piece's table or logits that holds `id`, or -1.
int64_t Local(int32_t id, int64_t start, int64_t rows) {
  const int64_t local = static_cast<int64_t>(id) - start;
  return local >= 0 && local < rows ? local : -1;
}

}  // namespace

template <typename T>
void EmbeddingShardForward(const int32_t* tokens, const T* table, T* out, int64_t num_tokens,
                           int64_t start, int64_t rows, int64_t dim) {
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t local = Local(tokens[i], start, rows);
    T* y = out + i * dim;
    for (int64_t c = 0; c < dim; ++c) y[c] = local >= 0 ? table[local * dim + c] : T(0);
  }
}

template <typename T>
void EmbeddingShardBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t num_tokens,
                            int64_t start, int64_t rows, int64_t dim) {
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t local = Local(tokens[i], start, rows);
    if (local < 0) continue;
    for (int64_t c = 0; c < dim; ++c) dtable[local * dim + c] += dout[i * dim + c];
  }
}

template <typename T>
void CrossEntropyShardForward(const T* logits, const int32_t* targets, T* piece_lse,
                              T* target_logit, int64_t rows, int64_t cols, int64_t start) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T max = row[0];
    for (int64_t v = 1; v < cols; ++v) max = row[v] > max ? row[v] : max;
    double sum = 0;  // fp64 for fp32 too: the pieces' roundings add up again in the combine
    for (int64_t v = 0; v < cols; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
    piece_lse[r] = static_cast<T>(static_cast<double>(max) + std::log(sum));
    const int64_t local = targets[r] == kIgnoreIndex ? -1 : Local(targets[r], start, cols);
    target_logit[r] = local >= 0 ? row[local] : T(0);
  }
}

template <typename T>
T CrossEntropyShardLoss(const T* piece_lse, const T* target_logit, const int32_t* targets, T* lse,
                        int64_t pieces, int64_t rows) {
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    T max = piece_lse[r];
    for (int64_t p = 1; p < pieces; ++p)
      max = piece_lse[p * rows + r] > max ? piece_lse[p * rows + r] : max;
    double sum = 0;
    for (int64_t p = 0; p < pieces; ++p) {
      sum += std::exp(static_cast<double>(piece_lse[p * rows + r]) - max);
    }
    lse[r] = static_cast<T>(static_cast<double>(max) + std::log(sum));
    if (targets[r] == kIgnoreIndex) continue;
    total += static_cast<double>(lse[r]) - static_cast<double>(target_logit[r]);
    ++count;
  }
  return count > 0 ? static_cast<T>(total / static_cast<double>(count)) : T(0);
}

template <typename T>
void CrossEntropyShardBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                               T* dlogits, int64_t rows, int64_t cols, int64_t start) {
  const int64_t count = CountValidTargets(targets, rows);
  const T scale = count > 0 ? dloss / static_cast<T>(count) : T(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t target = targets[r];
    const int64_t local = target == kIgnoreIndex ? -1 : Local(target, start, cols);
    for (int64_t v = 0; v < cols; ++v) {
      const int64_t i = r * cols + v;
      if (target == kIgnoreIndex) {
        dlogits[i] = 0;
        continue;
      }
      const T p = std::exp(logits[i] - lse[r]);
      dlogits[i] = scale * (v == local ? p - T(1) : p);
    }
  }
}

#define SLUICE_INSTANTIATE(T)                                                                      \
  template void EmbeddingShardForward<T>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t,  \
                                         int64_t);                                                 \
  template void EmbeddingShardBackward<T>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t, \
                                          int64_t);                                                \
  template void CrossEntropyShardForward<T>(const T*, const int32_t*, T*, T*, int64_t, int64_t,    \
                                            int64_t);                                              \
  template T CrossEntropyShardLoss<T>(const T*, const T*, const int32_t*, T*, int64_t, int64_t);   \
  template void CrossEntropyShardBackward<T>(const T*, const int32_t*, const T*, T, T*, int64_t,   \
                                             int64_t, int64_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
