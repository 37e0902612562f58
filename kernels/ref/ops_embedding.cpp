#include "kernels/ref/ops_embedding.h"

#include "kernels/ref/ops_common.h"

namespace sluice::kernels {

int64_t FirstInvalidToken(const int32_t* tokens, int64_t count, int64_t vocab) {
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) return i;
  }
  return -1;
}

}  // namespace sluice::kernels

namespace sluice::kernels::ref {
namespace {

void CheckTokens(const int32_t* tokens, int64_t num_tokens, int64_t vocab, const char* op) {
  const int64_t bad = FirstInvalidToken(tokens, num_tokens, vocab);
  if (bad >= 0) {
    internal::OpsFail(op, "token id %d at index %lld is outside [0, %lld)", tokens[bad],
                      (long long)bad, (long long)vocab);
  }
}

void CheckPositions(int64_t seq, int64_t positions, const char* op) {
  if (seq > positions) {
    internal::OpsFail(op, "seq = %lld exceeds the %lld learned positions", (long long)seq,
                      (long long)positions);
  }
}

}  // namespace

template <typename T>
void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t num_tokens,
                      int64_t vocab, int64_t dim) {
  CheckTokens(tokens, num_tokens, vocab, "EmbeddingForward");
  for (int64_t i = 0; i < num_tokens; ++i) {
    for (int64_t c = 0; c < dim; ++c) out[i * dim + c] = table[tokens[i] * dim + c];
  }
}

template <typename T>
void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t num_tokens,
                       int64_t vocab, int64_t dim) {
  CheckTokens(tokens, num_tokens, vocab, "EmbeddingBackward");
  for (int64_t i = 0; i < num_tokens; ++i) {
    for (int64_t c = 0; c < dim; ++c) dtable[tokens[i] * dim + c] += dout[i * dim + c];
  }
}

template <typename T>
void PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq, int64_t positions,
                              int64_t dim) {
  CheckPositions(seq, positions, "PositionEmbeddingForward");
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t c = 0; c < dim; ++c) x[(b * seq + t) * dim + c] += wpe[t * dim + c];
    }
  }
}

template <typename T>
void PositionEmbeddingBackward(const T* dx, T* dwpe, int64_t batch, int64_t seq, int64_t positions,
                               int64_t dim) {
  CheckPositions(seq, positions, "PositionEmbeddingBackward");
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t c = 0; c < dim; ++c) {
      T sum = 0;
      for (int64_t b = 0; b < batch; ++b) sum += dx[(b * seq + t) * dim + c];
      dwpe[t * dim + c] += sum;
    }
  }
}

#define SLUICE_INSTANTIATE(T)                                                                  \
  template void EmbeddingForward<T>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t);  \
  template void EmbeddingBackward<T>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t); \
  template void PositionEmbeddingForward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t); \
  template void PositionEmbeddingBackward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
