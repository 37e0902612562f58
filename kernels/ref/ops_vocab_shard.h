// Scalar reference: the kernels of a vocabulary split over tensor-parallel ranks (Megatron's
// VocabParallelEmbedding and vocabulary-parallel cross-entropy), fp32 or fp64. A piece holds the
// ids [start, start + rows) of the whole vocabulary: the rows of its table, the columns of its
// logits. Token ids and targets are ids of the whole vocabulary (validated by the caller).
//
// The cross-entropy never sees the whole logits: each piece's log-sum-exp and the target's logit
// (held by one piece) are combined by the caller's collectives, then CrossEntropyShardLoss
// finishes the loss from the pieces' log-sum-exps (flash-attn's tensor-parallel cross-entropy).
#pragma once

#include <cstdint>

namespace sluice::kernels::ref {

// out[i, :] = table[tokens[i] - start, :] where the piece holds tokens[i], else zeros.
template <typename T>
void EmbeddingShardForward(const int32_t* tokens, const T* table, T* out, int64_t num_tokens,
                           int64_t start, int64_t rows, int64_t dim);

// dtable[tokens[i] - start, :] += dout[i, :] in token order for the tokens the piece holds.
template <typename T>
void EmbeddingShardBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t num_tokens,
                            int64_t start, int64_t rows, int64_t dim);

// logits [rows, cols] (columns start .. start + cols of the vocabulary): piece_lse[r] =
// log(sum_v exp(logits[r, v])) around the row maximum, summed in fp64; target_logit[r] = logits[r, targets[r] -
// start] where the piece holds targets[r], else 0 (ignored rows too).
template <typename T>
void CrossEntropyShardForward(const T* logits, const int32_t* targets, T* piece_lse,
                              T* target_logit, int64_t rows, int64_t cols, int64_t start);

// piece_lse [pieces, rows] (every piece's log-sum-exp), target_logit [rows] (summed over the
// pieces): lse[r] = log(sum_p exp(piece_lse[p, r])) around the largest, in fp64; returns the mean of
// lse[r] - target_logit[r] over the rows whose target is not kIgnoreIndex (summed in fp64, in
// row order), 0 when there are none.
template <typename T>
T CrossEntropyShardLoss(const T* piece_lse, const T* target_logit, const int32_t* targets, T* lse,
                        int64_t pieces, int64_t rows);

// dlogits[r, v] = dloss / n * (exp(logits[r, v] - lse[r]) - [start + v == targets[r]]), 0 for
// ignored rows; n counts the rows not ignored. dlogits may alias logits.
template <typename T>
void CrossEntropyShardBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                               T* dlogits, int64_t rows, int64_t cols, int64_t start);

}  // namespace sluice::kernels::ref
