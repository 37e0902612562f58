#include "kernels/cpu/ops_embedding.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops_parallel.h"

namespace sluice::kernels::cpu {
namespace {

void CheckTokens(const int32_t* tokens, int64_t num_tokens, int64_t vocab, const char* op) {
  const int64_t bad = FirstInvalidToken(tokens, num_tokens, vocab);
  if (bad >= 0) {
    sluice::kernels::internal::OpsFail(op, "token id %d at index %lld is outside [0, %lld)",
                                       tokens[bad], (long long)bad, (long long)vocab);
  }
}

void CheckPositions(int64_t seq, int64_t positions, const char* op) {
  if (seq > positions) {
    sluice::kernels::internal::OpsFail(op, "seq = %lld exceeds the %lld learned positions",
                                       (long long)seq, (long long)positions);
  }
}

}  // namespace

void EmbeddingForward(const int32_t* tokens, const float* table, float* out, int64_t num_tokens,
                      int64_t vocab, int64_t dim, int num_threads) {
  CheckTokens(tokens, num_tokens, vocab, "EmbeddingForward");
  const int threads = internal::OpsThreads(num_threads, num_tokens * dim);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < num_tokens; ++i) {
    std::memcpy(out + i * dim, table + static_cast<int64_t>(tokens[i]) * dim, dim * sizeof(float));
  }
}

void EmbeddingBackward(const int32_t* tokens, const float* dout, float* dtable, int64_t num_tokens,
                       int64_t vocab, int64_t dim, int num_threads) {
  CheckTokens(tokens, num_tokens, vocab, "EmbeddingBackward");
  constexpr int64_t kBlock = internal::kColumnBlock;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  const int threads = internal::OpsThreads(num_threads, num_tokens * dim);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t c0 = block * kBlock;
    const int64_t width = std::min(kBlock, dim - c0);
    for (int64_t i = 0; i < num_tokens; ++i) {
      float* row = dtable + static_cast<int64_t>(tokens[i]) * dim + c0;
      const float* src = dout + i * dim + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) row[c] += src[c];
    }
  }
}

void PositionEmbeddingForward(const float* wpe, float* x, int64_t batch, int64_t seq,
                              int64_t positions, int64_t dim, int num_threads) {
  CheckPositions(seq, positions, "PositionEmbeddingForward");
  const int64_t tokens = batch * seq;
  const int threads = internal::OpsThreads(num_threads, tokens * dim);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t token = 0; token < tokens; ++token) {
    const float* p = wpe + (token % seq) * dim;
    float* row = x + token * dim;
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) row[c] += p[c];
  }
}

void PositionEmbeddingBackward(const float* dx, float* dwpe, int64_t batch, int64_t seq,
                               int64_t positions, int64_t dim, int num_threads) {
  CheckPositions(seq, positions, "PositionEmbeddingBackward");
  // dx viewed as [batch, seq * dim]: the gradient of wpe[:seq] is its column sums.
  internal::ColumnSums(dx, dwpe, batch, seq * dim, num_threads);
}

}  // namespace sluice::kernels::cpu
