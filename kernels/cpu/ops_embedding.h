// CPU backend of the token and learned position embeddings: fp32, OpenMP over tokens for the
// lookups and over column blocks for the scatter-add (tokens added in order, so results do not
// depend on the thread count and no two threads write one row). Same semantics and shapes as
// kernels/ref/ops_embedding.h; parameter gradients accumulate.
#pragma once

#include <cstdint>

#include "kernels/ref/ops_embedding.h"

namespace sluice::kernels::cpu {

void EmbeddingForward(const int32_t* tokens, const float* table, float* out, int64_t num_tokens,
                      int64_t vocab, int64_t dim, int num_threads = 0);

void EmbeddingBackward(const int32_t* tokens, const float* dout, float* dtable, int64_t num_tokens,
                       int64_t vocab, int64_t dim, int num_threads = 0);

void PositionEmbeddingForward(const float* wpe, float* x, int64_t batch, int64_t seq,
                              int64_t positions, int64_t dim, int num_threads = 0);

void PositionEmbeddingBackward(const float* dx, float* dwpe, int64_t batch, int64_t seq,
                               int64_t positions, int64_t dim, int num_threads = 0);

}  // namespace sluice::kernels::cpu
