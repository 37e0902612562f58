// Causal self-attention, multi-head or grouped-query, with its projections.
//   fused (GPT-2): qkv = c_attn(x) with c_attn.weight [(Hq + 2 Hkv) * D, d] holding the q, k and v
//     rows in that order (Hugging Face's Conv1D c_attn transposed), y = c_proj(attention(q, k, v)).
//   separate (Llama): q = q_proj(x), k = k_proj(x), v = v_proj(x), optional RoPE on q and k,
//     y = o_proj(attention(q, k, v)).
// The output projection is initialized as a residual projection (init.h).
// The heads it runs are those its projections' weights hold: all of them, or a tensor rank's
// share when a tensor-parallel plan gives the projections pieces of their weights (GPT-2's c_attn
// split per q, k and v, parameter_registry.h); head_dim is d_model / n_head either way.
#pragma once

#include <memory>
#include <string>

#include "engine/model/linear.h"
#include "engine/model/rope.h"

namespace sluice::model {

struct AttentionOptions {
  int64_t d_model = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  bool fused_qkv = false;  // GPT-2 names (c_attn, c_proj) and one q/k/v projection
  bool bias = false;
  bool rope = false;
  double rope_theta = 10000.0;
};

template <typename T>
class CausalSelfAttention final : public Module<T> {
 public:
  CausalSelfAttention(ModuleBuilder& builder, std::string name, const AttentionOptions& options);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

 private:
  int64_t q_width() const { return n_head_ * head_dim_; }
  int64_t kv_width() const { return n_kv_head_ * head_dim_; }
  // The kernel's views: q, out [batch, seq, heads, head_dim]; k, v with the kv heads; lse
  // [batch, heads, seq].
  Shape QShape(const ForwardContext<T>& ctx) const {
    return {ctx.batch(), ctx.seq(), n_head_, head_dim_};
  }
  Shape KvShape(const ForwardContext<T>& ctx) const {
    return {ctx.batch(), ctx.seq(), n_kv_head_, head_dim_};
  }
  Shape LseShape(const ForwardContext<T>& ctx) const { return {ctx.batch(), n_head_, ctx.seq()}; }

  AttentionOptions options_;
  int64_t head_dim_;
  int64_t n_head_;  // the heads this module runs (a tensor rank's share, or all)
  int64_t n_kv_head_;
  std::unique_ptr<Linear<T>> qkv_;  // fused
  std::unique_ptr<Linear<T>> q_;    // separate
  std::unique_ptr<Linear<T>> k_;
  std::unique_ptr<Linear<T>> v_;
  std::unique_ptr<Rope<T>> rope_q_;
  std::unique_ptr<Rope<T>> rope_k_;
  std::unique_ptr<Linear<T>> out_;
};

extern template class CausalSelfAttention<float>;
extern template class CausalSelfAttention<double>;

}  // namespace sluice::model
