#include "kernels/cpu/ops_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops_parallel.h"
#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu {
namespace {

void CheckDims(const AttentionDims& dims, const char* op) {
  const std::string error = AttentionDimsError(dims);
  if (!error.empty()) sluice::kernels::internal::OpsFail(op, "%s", error.c_str());
  internal::BlasInt(dims.seq * dims.seq, op);
  internal::BlasInt(dims.q_heads * dims.head_dim, op);
}

// Offsets and leading dimensions of one (batch, head) slice of the token-major tensors.
struct Layout {
  int64_t seq;
  int64_t dim;
  int ld_q;   // q_heads * head_dim: q, out, dq, dout
  int ld_kv;  // kv_heads * head_dim: k, v, dk, dv
  int64_t QOffset(int64_t b, int64_t h) const { return b * seq * ld_q + h * dim; }
  int64_t KvOffset(int64_t b, int64_t g) const { return b * seq * ld_kv + g * dim; }
};

Layout MakeLayout(const AttentionDims& dims) {
  return {dims.seq, dims.head_dim, static_cast<int>(dims.q_heads * dims.head_dim),
          static_cast<int>(dims.kv_heads * dims.head_dim)};
}

// The products' team: the calling thread, as for the softmax rows. OpenBLAS threads its own
// calls; GemmFixed (device.cpu_gemm deterministic) is not given the cores for one head's small
// products, whose fork and join would cost about what they save at the demo's shapes.
constexpr int kGemmThreads = 1;

// s [seq, seq] = scale * q_h · k_gᵀ (every entry; the caller masks).
void Scores(const float* qh, const float* kg, float* s, const Layout& l, float scale) {
  Gemm(false, true, l.seq, l.seq, l.dim, scale, qh, l.ld_q, kg, l.ld_kv, 0.0f, s, l.seq,
       kGemmThreads);
}

// The team of the vector path: one (batch, head) pair costs about seq^2 * head_dim / 2
// multiply-adds, so a team pays off from a few pairs of the demo's size on.
int VectorThreads(int requested, const AttentionDims& dims, int64_t tasks) {
  const int64_t work = tasks * dims.seq * dims.seq * dims.head_dim / 2;
  const int threads = internal::OpsThreads(requested, work, int64_t{1} << 18);
  return static_cast<int>(std::min<int64_t>(threads, tasks));
}

void VectorForward(const internal::OpsVectorVariant& vec, const float* q, const float* k,
                   const float* v, float* out, float* lse, const AttentionDims& dims,
                   int num_threads) {
  const Layout l = MakeLayout(dims);
  const int64_t group = dims.q_heads / dims.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dims.head_dim));
  const int64_t tasks = dims.batch * dims.q_heads;
  const int threads = VectorThreads(num_threads, dims, tasks);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / dims.q_heads;
    const int64_t h = task % dims.q_heads;
    const int64_t g = h / group;
    vec.attention_forward_head(q + l.QOffset(b, h), k + l.KvOffset(b, g), v + l.KvOffset(b, g),
                               out + l.QOffset(b, h), lse + task * dims.seq, dims.seq,
                               dims.head_dim, l.ld_q, l.ld_kv, scale);
  }
}

void VectorBackward(const internal::OpsVectorVariant& vec, const float* q, const float* k,
                    const float* v, const float* out, const float* lse, const float* dout,
                    float* dq, float* dk, float* dv, const AttentionDims& dims, int num_threads) {
  const Layout l = MakeLayout(dims);
  const int64_t group = dims.q_heads / dims.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dims.head_dim));
  const int64_t tasks = dims.batch * dims.kv_heads;
  const int threads = VectorThreads(num_threads, dims, tasks * group);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / dims.kv_heads;
    const int64_t g = task % dims.kv_heads;
    const int64_t h0 = g * group;
    vec.attention_backward_group(q + l.QOffset(b, h0), k + l.KvOffset(b, g), v + l.KvOffset(b, g),
                                 out + l.QOffset(b, h0), lse + (b * dims.q_heads + h0) * dims.seq,
                                 dout + l.QOffset(b, h0), dq + l.QOffset(b, h0),
                                 dk + l.KvOffset(b, g), dv + l.KvOffset(b, g), group, dims.head_dim,
                                 dims.seq, dims.head_dim, l.ld_q, l.ld_kv, scale);
  }
}

}  // namespace

void AttentionForward(const float* q, const float* k, const float* v, float* out, float* lse,
                      const AttentionDims& dims, float* workspace, int num_threads) {
  CheckDims(dims, "AttentionForward");
  if (dims.batch == 0 || dims.seq == 0) return;
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
    VectorForward(*vec, q, k, v, out, lse, dims, num_threads);
    return;
  }
  const Layout l = MakeLayout(dims);
  const int n = static_cast<int>(dims.seq);
  const int d = static_cast<int>(dims.head_dim);
  const int64_t group = dims.q_heads / dims.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dims.head_dim));
  float* p = workspace;
  for (int64_t b = 0; b < dims.batch; ++b) {
    for (int64_t h = 0; h < dims.q_heads; ++h) {
      const int64_t g = h / group;
      Scores(q + l.QOffset(b, h), k + l.KvOffset(b, g), p, l, scale);
      float* lse_h = lse + (b * dims.q_heads + h) * dims.seq;
      for (int64_t i = 0; i < dims.seq; ++i) {
        float* row = p + i * dims.seq;
        float max = row[0];
        for (int64_t j = 1; j <= i; ++j) max = std::max(max, row[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < dims.seq; ++j) row[j] = 0.0f;
        lse_h[i] = max + std::log(sum);
      }
      // out_h [seq, dim] = P [seq, seq] · v_g [seq, dim]
      Gemm(false, false, n, d, n, 1.0f, p, n, v + l.KvOffset(b, g), l.ld_kv, 0.0f,
           out + l.QOffset(b, h), l.ld_q, kGemmThreads);
    }
  }
}

void AttentionBackward(const float* q, const float* k, const float* v, const float* out,
                       const float* lse, const float* dout, float* dq, float* dk, float* dv,
                       const AttentionDims& dims, float* workspace, int num_threads) {
  CheckDims(dims, "AttentionBackward");
  if (dims.batch == 0 || dims.seq == 0) return;
  if (const internal::OpsVectorVariant* vec = internal::ActiveOpsVectorVariant()) {
    VectorBackward(*vec, q, k, v, out, lse, dout, dq, dk, dv, dims, num_threads);
    return;
  }
  const Layout l = MakeLayout(dims);
  const int n = static_cast<int>(dims.seq);
  const int d = static_cast<int>(dims.head_dim);
  const int64_t group = dims.q_heads / dims.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dims.head_dim));
  float* p = workspace;
  float* ds = workspace + dims.seq * dims.seq;
  float* delta = workspace + 2 * dims.seq * dims.seq;
  for (int64_t b = 0; b < dims.batch; ++b) {
    for (int64_t h = 0; h < dims.q_heads; ++h) {
      const int64_t g = h / group;
      // The first query head of a group overwrites dk and dv; the others add to them.
      const float beta = h % group == 0 ? 0.0f : 1.0f;
      const float* qh = q + l.QOffset(b, h);
      const float* oh = out + l.QOffset(b, h);
      const float* doh = dout + l.QOffset(b, h);
      const float* kg = k + l.KvOffset(b, g);
      const float* vg = v + l.KvOffset(b, g);
      const float* lse_h = lse + (b * dims.q_heads + h) * dims.seq;
      Scores(qh, kg, p, l, scale);
      // ds [seq, seq] = dout_h · v_gᵀ, the gradient of the probabilities.
      Gemm(false, true, n, n, d, 1.0f, doh, l.ld_q, vg, l.ld_kv, 0.0f, ds, n, kGemmThreads);
      for (int64_t i = 0; i < dims.seq; ++i) {
        const float* o_i = oh + i * l.ld_q;
        const float* do_i = doh + i * l.ld_q;
        float dot = 0.0f;
        for (int64_t c = 0; c < dims.head_dim; ++c) dot += do_i[c] * o_i[c];
        delta[i] = dot;
        float* p_row = p + i * dims.seq;
        float* ds_row = ds + i * dims.seq;
        for (int64_t j = 0; j <= i; ++j) {
          p_row[j] = std::exp(p_row[j] - lse_h[i]);
          ds_row[j] = p_row[j] * (ds_row[j] - dot);
        }
        for (int64_t j = i + 1; j < dims.seq; ++j) {
          p_row[j] = 0.0f;
          ds_row[j] = 0.0f;
        }
      }
      // dv_g (+)= Pᵀ · dout_h
      Gemm(true, false, n, d, n, 1.0f, p, n, doh, l.ld_q, beta, dv + l.KvOffset(b, g), l.ld_kv,
           kGemmThreads);
      // dq_h = scale * dS · k_g
      Gemm(false, false, n, d, n, scale, ds, n, kg, l.ld_kv, 0.0f, dq + l.QOffset(b, h), l.ld_q,
           kGemmThreads);
      // dk_g (+)= scale * dSᵀ · q_h
      Gemm(true, false, n, d, n, scale, ds, n, qh, l.ld_q, beta, dk + l.KvOffset(b, g), l.ld_kv,
           kGemmThreads);
    }
  }
}

}  // namespace sluice::kernels::cpu
