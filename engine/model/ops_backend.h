// Ops<T>: the op set a layer of scalar type T runs on, chosen at compile time. Ops<double> is the
// scalar reference (kernels/ref), used by the fp64 finite-difference tests; Ops<float> is the CPU
// backend (kernels/cpu: OpenMP, OpenBLAS GEMMs) that training uses. Both follow the kernels'
// conventions: input gradients are overwritten, parameter gradients accumulate, a null gradient
// pointer skips that gradient. `threads` is ignored by the reference ops.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops_activation.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_linear.h"
#include "kernels/cpu/ops_loss.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_attention.h"
#include "kernels/ref/ops_elementwise.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_linear.h"
#include "kernels/ref/ops_loss.h"
#include "kernels/ref/ops_norm.h"
#include "kernels/ref/ops_rope.h"

namespace sluice::model {

template <typename T>
struct Ops;

template <>
struct Ops<double> {
  using T = double;
  static void Add(const T* a, const T* b, T* y, int64_t n, int) { kernels::ref::Add(a, b, y, n); }
  static void Accumulate(const T* x, T* y, int64_t n, int) { kernels::ref::Accumulate(x, y, n); }
  static void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t n,
                               int64_t vocab, int64_t dim, int) {
    kernels::ref::EmbeddingForward(tokens, table, out, n, vocab, dim);
  }
  static void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t n,
                                int64_t vocab, int64_t dim, int) {
    kernels::ref::EmbeddingBackward(tokens, dout, dtable, n, vocab, dim);
  }
  static void PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq,
                                       int64_t positions, int64_t dim, int) {
    kernels::ref::PositionEmbeddingForward(wpe, x, batch, seq, positions, dim);
  }
  static void PositionEmbeddingBackward(const T* dx, T* dwpe, int64_t batch, int64_t seq,
                                        int64_t positions, int64_t dim, int) {
    kernels::ref::PositionEmbeddingBackward(dx, dwpe, batch, seq, positions, dim);
  }
  static void LinearForward(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t in,
                            int64_t out, int) {
    kernels::ref::LinearForward(x, w, b, y, rows, in, out);
  }
  static void LinearBackward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int64_t rows,
                             int64_t in, int64_t out, int) {
    kernels::ref::LinearBackward(x, w, dy, dx, dw, db, rows, in, out);
  }
  static void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                               int64_t rows, int64_t cols, float eps, int) {
    kernels::ref::LayerNormForward(x, gamma, beta, y, mean, rstd, rows, cols, eps);
  }
  static void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd,
                                const T* dy, T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t cols,
                                int) {
    kernels::ref::LayerNormBackward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols);
  }
  static void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int64_t rows, int64_t cols,
                             float eps, int) {
    kernels::ref::RmsNormForward(x, gamma, y, rstd, rows, cols, eps);
  }
  static void RmsNormBackward(const T* x, const T* gamma, const T* rstd, const T* dy, T* dx,
                              T* dgamma, int64_t rows, int64_t cols, int) {
    kernels::ref::RmsNormBackward(x, gamma, rstd, dy, dx, dgamma, rows, cols);
  }
  static void GeluForward(const T* x, T* y, int64_t n, int) { kernels::ref::GeluForward(x, y, n); }
  static void GeluBackward(const T* x, const T* dy, T* dx, int64_t n, int) {
    kernels::ref::GeluBackward(x, dy, dx, n);
  }
  static void SwiGluForward(const T* gate, const T* up, T* y, int64_t n, int) {
    kernels::ref::SwiGluForward(gate, up, y, n);
  }
  static void SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n,
                             int) {
    kernels::ref::SwiGluBackward(gate, up, dy, dgate, dup, n);
  }
  static void RopeForward(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads,
                          int64_t head_dim, float theta, int) {
    kernels::ref::RopeForward(x, y, batch, seq, heads, head_dim, theta);
  }
  static void RopeBackward(const T* dy, T* dx, int64_t batch, int64_t seq, int64_t heads,
                           int64_t head_dim, float theta, int) {
    kernels::ref::RopeBackward(dy, dx, batch, seq, heads, head_dim, theta);
  }
  static void AttentionForward(const T* q, const T* k, const T* v, T* out, T* lse,
                               const kernels::AttentionDims& dims, T* workspace) {
    kernels::ref::AttentionForward(q, k, v, out, lse, dims, workspace);
  }
  static void AttentionBackward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                                const T* dout, T* dq, T* dk, T* dv,
                                const kernels::AttentionDims& dims, T* workspace) {
    kernels::ref::AttentionBackward(q, k, v, out, lse, dout, dq, dk, dv, dims, workspace);
  }
  static T CrossEntropyForward(const T* logits, const int32_t* targets, T* lse, int64_t rows,
                               int64_t vocab, int) {
    return kernels::ref::CrossEntropyForward(logits, targets, lse, rows, vocab);
  }
  static void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                                   T* dlogits, int64_t rows, int64_t vocab, int) {
    kernels::ref::CrossEntropyBackward(logits, targets, lse, dloss, dlogits, rows, vocab);
  }
};

template <>
struct Ops<float> {
  using T = float;
  static void Add(const T* a, const T* b, T* y, int64_t n, int threads) {
    kernels::cpu::Add(a, b, y, n, threads);
  }
  static void Accumulate(const T* x, T* y, int64_t n, int threads) {
    kernels::cpu::Accumulate(x, y, n, threads);
  }
  static void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t n,
                               int64_t vocab, int64_t dim, int threads) {
    kernels::cpu::EmbeddingForward(tokens, table, out, n, vocab, dim, threads);
  }
  static void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t n,
                                int64_t vocab, int64_t dim, int threads) {
    kernels::cpu::EmbeddingBackward(tokens, dout, dtable, n, vocab, dim, threads);
  }
  static void PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq,
                                       int64_t positions, int64_t dim, int threads) {
    kernels::cpu::PositionEmbeddingForward(wpe, x, batch, seq, positions, dim, threads);
  }
  static void PositionEmbeddingBackward(const T* dx, T* dwpe, int64_t batch, int64_t seq,
                                        int64_t positions, int64_t dim, int threads) {
    kernels::cpu::PositionEmbeddingBackward(dx, dwpe, batch, seq, positions, dim, threads);
  }
  static void LinearForward(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t in,
                            int64_t out, int threads) {
    kernels::cpu::LinearForward(x, w, b, y, rows, in, out, threads);
  }
  static void LinearBackward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int64_t rows,
                             int64_t in, int64_t out, int threads) {
    kernels::cpu::LinearBackward(x, w, dy, dx, dw, db, rows, in, out, threads);
  }
  static void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                               int64_t rows, int64_t cols, float eps, int threads) {
    kernels::cpu::LayerNormForward(x, gamma, beta, y, mean, rstd, rows, cols, eps, threads);
  }
  static void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd,
                                const T* dy, T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t cols,
                                int threads) {
    kernels::cpu::LayerNormBackward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols,
                                    threads);
  }
  static void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int64_t rows, int64_t cols,
                             float eps, int threads) {
    kernels::cpu::RmsNormForward(x, gamma, y, rstd, rows, cols, eps, threads);
  }
  static void RmsNormBackward(const T* x, const T* gamma, const T* rstd, const T* dy, T* dx,
                              T* dgamma, int64_t rows, int64_t cols, int threads) {
    kernels::cpu::RmsNormBackward(x, gamma, rstd, dy, dx, dgamma, rows, cols, threads);
  }
  static void GeluForward(const T* x, T* y, int64_t n, int threads) {
    kernels::cpu::GeluForward(x, y, n, threads);
  }
  static void GeluBackward(const T* x, const T* dy, T* dx, int64_t n, int threads) {
    kernels::cpu::GeluBackward(x, dy, dx, n, threads);
  }
  static void SwiGluForward(const T* gate, const T* up, T* y, int64_t n, int threads) {
    kernels::cpu::SwiGluForward(gate, up, y, n, threads);
  }
  static void SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n,
                             int threads) {
    kernels::cpu::SwiGluBackward(gate, up, dy, dgate, dup, n, threads);
  }
  static void RopeForward(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads,
                          int64_t head_dim, float theta, int threads) {
    kernels::cpu::RopeForward(x, y, batch, seq, heads, head_dim, theta, threads);
  }
  static void RopeBackward(const T* dy, T* dx, int64_t batch, int64_t seq, int64_t heads,
                           int64_t head_dim, float theta, int threads) {
    kernels::cpu::RopeBackward(dy, dx, batch, seq, heads, head_dim, theta, threads);
  }
  static void AttentionForward(const T* q, const T* k, const T* v, T* out, T* lse,
                               const kernels::AttentionDims& dims, T* workspace) {
    kernels::cpu::AttentionForward(q, k, v, out, lse, dims, workspace);
  }
  static void AttentionBackward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                                const T* dout, T* dq, T* dk, T* dv,
                                const kernels::AttentionDims& dims, T* workspace) {
    kernels::cpu::AttentionBackward(q, k, v, out, lse, dout, dq, dk, dv, dims, workspace);
  }
  static T CrossEntropyForward(const T* logits, const int32_t* targets, T* lse, int64_t rows,
                               int64_t vocab, int threads) {
    return kernels::cpu::CrossEntropyForward(logits, targets, lse, rows, vocab, threads);
  }
  static void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                                   T* dlogits, int64_t rows, int64_t vocab, int threads) {
    kernels::cpu::CrossEntropyBackward(logits, targets, lse, dloss, dlogits, rows, vocab, threads);
  }
};

}  // namespace sluice::model
