// Shared by the dispatching op kernels (ops_activation.cpp, ops_norm.cpp, ops_loss.cpp,
// ops_attention.cpp) and the per-ISA vector kernels (ops_vector_avx2.cpp, ops_vector_avx512.cpp,
// both built from ops_vector_impl.h). Each variant works on the calling thread; the dispatchers
// split rows, elements or heads between threads as the fixed loops do.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"

namespace sluice::kernels::cpu::internal {

struct OpsVectorVariant {
  Isa isa;
  // Elementwise over [0, n), the semantics of kernels/ref/ops_activation.h.
  void (*gelu_forward)(const float* x, float* y, int64_t n);
  void (*gelu_backward)(const float* x, const float* dy, float* dx, int64_t n);
  void (*swiglu_forward)(const float* gate, const float* up, float* y, int64_t n);
  void (*swiglu_backward)(const float* gate, const float* up, const float* dy, float* dgate,
                          float* dup, int64_t n);
  // One row of cols elements; the parameter gradients stay with the dispatcher (column sums).
  void (*layernorm_forward_row)(const float* x, const float* gamma, const float* beta, float* y,
                                float* mean, float* rstd, int64_t cols, float eps);
  void (*layernorm_backward_row)(const float* x, const float* gamma, float mean, float rstd,
                                 const float* dy, float* dx, int64_t cols);
  void (*rmsnorm_forward_row)(const float* x, const float* gamma, float* y, float* rstd,
                              int64_t cols, float eps);
  void (*rmsnorm_backward_row)(const float* x, const float* gamma, float rstd, const float* dy,
                               float* dx, int64_t cols);
  // log(sum_v exp(row[v])) over n > 0 entries.
  float (*logsumexp_row)(const float* row, int64_t n);
  // out[v] = scale * exp(row[v] - shift) for v < n; out may alias row.
  void (*scaled_exp_row)(const float* row, float shift, float scale, float* out, int64_t n);
  // Causal attention of one query head (kernels/ref/ops_attention.h) over its key/value head,
  // tiled: blocks of key columns with an online softmax, no [seq, seq] matrix. q, out: the head's
  // first row, rows ld_q apart; k, v: ld_kv apart; lse: seq entries.
  void (*attention_forward_head)(const float* q, const float* k, const float* v, float* out,
                                 float* lse, int64_t seq, int64_t dim, int64_t ld_q, int64_t ld_kv,
                                 float scale);
  // The backward of one key/value head and its group of `group` query heads (q_stride floats
  // apart in q, out, dout, dq; lse: group * seq entries): dq overwritten, dk and dv overwritten
  // with the group's sums.
  void (*attention_backward_group)(const float* q, const float* k, const float* v, const float* out,
                                   const float* lse, const float* dout, float* dq, float* dk,
                                   float* dv, int64_t group, int64_t q_stride, int64_t seq,
                                   int64_t dim, int64_t ld_q, int64_t ld_kv, float scale);
};

const OpsVectorVariant& OpsVectorAvx2Variant();
const OpsVectorVariant& OpsVectorAvx512Variant();

// The variant for `isa` (nullptr for kScalar).
const OpsVectorVariant* OpsVectorVariantFor(Isa isa);

// What the ops run now: nullptr on the fixed path (ops_path.h), else OpsVectorVariantFor of
// OpsVectorIsa().
const OpsVectorVariant* ActiveOpsVectorVariant();

}  // namespace sluice::kernels::cpu::internal
