// Scalar reference: token and learned position embeddings (GPT-2's wte and wpe; Llama uses only
// the token table), forward and backward, fp32 or fp64. The backward of a lookup is a
// scatter-add into the table; parameter gradients accumulate (+=).
#pragma once

#include <cstdint>

namespace sluice::kernels {

// The index of the first token id outside [0, vocab), or -1 when all are valid. The kernels
// abort on such an id; callers that read ids from data check with this and return a Status.
int64_t FirstInvalidToken(const int32_t* tokens, int64_t count, int64_t vocab);

}  // namespace sluice::kernels

namespace sluice::kernels::ref {

// tokens [num_tokens] in [0, vocab), table [vocab, dim], out [num_tokens, dim]:
// out[i, :] = table[tokens[i], :].
template <typename T>
void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t num_tokens,
                      int64_t vocab, int64_t dim);

// dout [num_tokens, dim], dtable [vocab, dim]: dtable[tokens[i], :] += dout[i, :], in token
// order (a repeated id sums its rows).
template <typename T>
void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t num_tokens,
                       int64_t vocab, int64_t dim);

// wpe [positions, dim], x [batch, seq, dim], seq <= positions: x[b, t, :] += wpe[t, :].
template <typename T>
void PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq, int64_t positions,
                              int64_t dim);

// dx [batch, seq, dim], dwpe [positions, dim]: dwpe[t, :] += sum over b of dx[b, t, :].
template <typename T>
void PositionEmbeddingBackward(const T* dx, T* dwpe, int64_t batch, int64_t seq, int64_t positions,
                               int64_t dim);

}  // namespace sluice::kernels::ref
