#include "engine/train/flops.h"

namespace sluice::train {

ModelFlops CountModelFlops(const model::ModelOptions& o, int64_t seq_len) {
  const int64_t d = o.d_model;
  const int64_t ff = o.d_ff;
  const int64_t head_dim = d / o.n_head;
  const int64_t q = o.n_head * head_dim;
  int64_t block = 0;
  if (o.family == model::Family::kGpt2) {
    block = 3 * d * d      // attn.c_attn
            + d * d        // attn.c_proj
            + 2 * d * ff;  // mlp.c_fc, mlp.c_proj
  } else {
    const int64_t kv = o.n_kv_head * head_dim;
    block = 2 * d * q      // q_proj, o_proj
            + 2 * d * kv   // k_proj, v_proj
            + 3 * d * ff;  // gate_proj, up_proj, down_proj
  }
  ModelFlops f;
  f.matmul_parameters = o.n_layer * block + d * o.vocab_size;
  f.attention_per_token = 12 * o.n_layer * q * seq_len;
  f.per_token = 6 * f.matmul_parameters + f.attention_per_token;
  return f;
}

}  // namespace sluice::train
