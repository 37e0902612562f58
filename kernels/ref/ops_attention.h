// Scalar reference: the core of causal self-attention (after the q, k, v projections and RoPE,
// before the output projection), multi-head or grouped-query, forward and backward, fp32 or
// fp64. Semantics are F.scaled_dot_product_attention(q, k, v, is_causal=True) with Hugging
// Face's repeat_kv for grouped-query attention: query head h reads key/value head
// h / (q_heads / kv_heads).
//
// Layouts are packed, token-major, as the projections produce them:
//   q, out, dq, dout [batch, seq, q_heads, head_dim];  k, v, dk, dv [batch, seq, kv_heads,
//   head_dim]; lse [batch, q_heads, seq].
// Forward, per (b, h) and query i, with scale = 1 / sqrt(head_dim):
//   s_ij = scale * q_i . k_j for j <= i (keys after i are masked out);
//   lse_i = log(sum_j exp(s_ij)); out_i = sum_j exp(s_ij - lse_i) * v_j.
// What the backward keeps: only lse (one value per query row), as FlashAttention does; the
// backward recomputes the probabilities P_ij = exp(s_ij - lse_i) instead of storing the
// [seq, seq] matrix per head. Backward, with D_i = dout_i . out_i:
//   dV_j += sum_i P_ij dout_i;  dS_ij = P_ij * (dout_i . v_j - D_i);
//   dq_i = scale * sum_j dS_ij k_j;  dk_j += scale * sum_i dS_ij q_i,
// summed over the query heads of a group for dk and dv. dq, dk and dv are overwritten.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::kernels {

struct AttentionDims {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;  // q_heads for multi-head attention, fewer for grouped-query
  int64_t head_dim = 0;
};

// Empty when the kernels accept dims, else what is wrong ("q_heads = 6 is not a multiple of
// kv_heads = 4"). The kernels abort on what this rejects.
std::string AttentionDimsError(const AttentionDims& dims);

// Elements (of the kernel's scalar type) of the workspace each attention kernel, forward or
// backward, needs from its caller: 2 * seq * seq + seq.
int64_t AttentionWorkspaceElements(const AttentionDims& dims);

}  // namespace sluice::kernels

namespace sluice::kernels::ref {

template <typename T>
void AttentionForward(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionDims& dims,
                      T* workspace);

template <typename T>
void AttentionBackward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                       const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims, T* workspace);

}  // namespace sluice::kernels::ref
