// The vector kernels of OpsVectorVariant (ops_vector_internal.h), written once over a vector
// type V and compiled per ISA: ops_vector_avx512.cpp (16 lanes) and ops_vector_avx2.cpp (8
// lanes) include this with their ISA flags and their V. Everything here has internal linkage,
// so the two instantiations never meet.
//
// V provides: kLanes; R (the register); Load, Store (kLanes floats), LoadN (n < kLanes floats,
// the other lanes `fill`), StoreN; Set1, Add, Sub, Mul, Div, Max, Fma (a * b + c), SumLanes,
// MaxLanes; Exp (expf to about 2 ulp; 0 below -87.3, so exp(-inf) is 0); LanesBelow(limit)
// (lane i holds i < limit, as a select mask) and Select(mask, a, b).
//
// Numerics against the fixed loops: sums run in kLanes (and 2 * kLanes) partial sums, exp is a
// polynomial, GELU is computed as x * sigmoid(2u) (equal to 0.5 x (1 + tanh u)) and the
// attention is tiled with an online softmax. The tests hold every variant to the fp64 reference
// with the fixed loops' declared tolerances.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu::internal {
namespace {

constexpr float kVecGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kVecGeluA = 0.044715f;

// Calls body(i, len, full) over [0, n) in steps of kLanes, the last step partial.
template <typename V, typename Body>
inline void ForLanes(int64_t n, const Body& body) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) body(i, static_cast<int64_t>(V::kLanes));
  if (i < n) body(i, n - i);
}

template <typename V>
inline typename V::R LoadAny(const float* p, int64_t len, float fill) {
  return len == V::kLanes ? V::Load(p) : V::LoadN(p, len, fill);
}

template <typename V>
inline void StoreAny(float* p, typename V::R v, int64_t len) {
  if (len == V::kLanes) {
    V::Store(p, v);
  } else {
    V::StoreN(p, v, len);
  }
}

template <typename V>
void GeluForwardV(const float* x, float* y, int64_t n) {
  using R = typename V::R;
  const R c = V::Set1(kVecGeluC), a = V::Set1(kVecGeluA), one = V::Set1(1.0f);
  const R minus_two = V::Set1(-2.0f);
  ForLanes<V>(n, [&](int64_t i, int64_t len) {
    const R v = LoadAny<V>(x + i, len, 0.0f);
    const R u = V::Mul(c, V::Fma(V::Mul(a, V::Mul(v, v)), v, v));
    const R s = V::Div(one, V::Add(one, V::Exp(V::Mul(minus_two, u))));
    StoreAny<V>(y + i, V::Mul(v, s), len);
  });
}

template <typename V>
void GeluBackwardV(const float* x, const float* dy, float* dx, int64_t n) {
  using R = typename V::R;
  const R c = V::Set1(kVecGeluC), a = V::Set1(kVecGeluA), one = V::Set1(1.0f);
  const R minus_two = V::Set1(-2.0f), two = V::Set1(2.0f), three_a = V::Set1(3.0f * kVecGeluA);
  ForLanes<V>(n, [&](int64_t i, int64_t len) {
    const R v = LoadAny<V>(x + i, len, 0.0f);
    const R d = LoadAny<V>(dy + i, len, 0.0f);
    const R v2 = V::Mul(v, v);
    const R u = V::Mul(c, V::Fma(V::Mul(a, v2), v, v));
    const R s = V::Div(one, V::Add(one, V::Exp(V::Mul(minus_two, u))));
    const R du = V::Mul(c, V::Fma(three_a, v2, one));
    // d/dv [v s(2u)] = s (1 + 2 v (1 - s) du), the tanh form's 0.5 (1 + t) + 0.5 v (1 - t^2) du.
    const R inner = V::Fma(V::Mul(two, v), V::Mul(V::Sub(one, s), du), one);
    StoreAny<V>(dx + i, V::Mul(d, V::Mul(s, inner)), len);
  });
}

template <typename V>
inline typename V::R SigmoidV(typename V::R g) {
  const typename V::R one = V::Set1(1.0f);
  return V::Div(one, V::Add(one, V::Exp(V::Sub(V::Set1(0.0f), g))));
}

template <typename V>
void SwiGluForwardV(const float* gate, const float* up, float* y, int64_t n) {
  ForLanes<V>(n, [&](int64_t i, int64_t len) {
    const auto g = LoadAny<V>(gate + i, len, 0.0f);
    const auto u = LoadAny<V>(up + i, len, 0.0f);
    StoreAny<V>(y + i, V::Mul(V::Mul(g, SigmoidV<V>(g)), u), len);
  });
}

template <typename V>
void SwiGluBackwardV(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                     int64_t n) {
  const auto one = V::Set1(1.0f);
  ForLanes<V>(n, [&](int64_t i, int64_t len) {
    const auto g = LoadAny<V>(gate + i, len, 0.0f);
    const auto u = LoadAny<V>(up + i, len, 0.0f);
    const auto d = LoadAny<V>(dy + i, len, 0.0f);
    const auto s = SigmoidV<V>(g);
    const auto ds = V::Mul(V::Mul(d, u), s);
    StoreAny<V>(dgate + i, V::Mul(ds, V::Fma(g, V::Sub(one, s), one)), len);
    StoreAny<V>(dup + i, V::Mul(V::Mul(d, g), s), len);
  });
}

// sum over c < n of f(x[c]) for a per-lane f, in 2 * kLanes partial sums; the pad lanes of a
// partial step read `fill` and must give 0.
template <typename V, typename F>
inline float SumRow(const float* x, int64_t n, float fill, const F& f) {
  auto acc0 = V::Set1(0.0f), acc1 = V::Set1(0.0f);
  int64_t i = 0;
  for (; i + 2 * V::kLanes <= n; i += 2 * V::kLanes) {
    acc0 = V::Add(acc0, f(V::Load(x + i), i));
    acc1 = V::Add(acc1, f(V::Load(x + i + V::kLanes), i + V::kLanes));
  }
  ForLanes<V>(n - i, [&](int64_t j, int64_t len) {
    acc0 = V::Add(acc0, f(LoadAny<V>(x + i + j, len, fill), i + j));
  });
  return V::SumLanes(V::Add(acc0, acc1));
}

template <typename V>
void LayerNormForwardRowV(const float* x, const float* gamma, const float* beta, float* y,
                          float* mean, float* rstd, int64_t cols, float eps) {
  using R = typename V::R;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float m = SumRow<V>(x, cols, 0.0f, [](R v, int64_t) { return v; }) * inv_cols;
  const R vm = V::Set1(m);
  const float sq = SumRow<V>(x, cols, m, [&](R v, int64_t) {
    const R d = V::Sub(v, vm);
    return V::Mul(d, d);
  });
  const float s = 1.0f / std::sqrt(sq * inv_cols + eps);
  const R vs = V::Set1(s);
  ForLanes<V>(cols, [&](int64_t i, int64_t len) {
    const R n = V::Mul(V::Sub(LoadAny<V>(x + i, len, 0.0f), vm), vs);
    R out = V::Mul(n, LoadAny<V>(gamma + i, len, 0.0f));
    if (beta != nullptr) out = V::Add(out, LoadAny<V>(beta + i, len, 0.0f));
    StoreAny<V>(y + i, out, len);
  });
  *mean = m;
  *rstd = s;
}

template <typename V>
void LayerNormBackwardRowV(const float* x, const float* gamma, float mean, float rstd,
                           const float* dy, float* dx, int64_t cols) {
  using R = typename V::R;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const R vm = V::Set1(mean), vs = V::Set1(rstd);
  R acc_g = V::Set1(0.0f), acc_gx = V::Set1(0.0f);
  ForLanes<V>(cols, [&](int64_t i, int64_t len) {
    const R g = V::Mul(LoadAny<V>(dy + i, len, 0.0f), LoadAny<V>(gamma + i, len, 0.0f));
    const R xhat = V::Mul(V::Sub(LoadAny<V>(x + i, len, mean), vm), vs);
    acc_g = V::Add(acc_g, g);
    acc_gx = V::Fma(g, xhat, acc_gx);
  });
  const R mean_g = V::Set1(V::SumLanes(acc_g) * inv_cols);
  const R mean_gx = V::Set1(V::SumLanes(acc_gx) * inv_cols);
  ForLanes<V>(cols, [&](int64_t i, int64_t len) {
    const R g = V::Mul(LoadAny<V>(dy + i, len, 0.0f), LoadAny<V>(gamma + i, len, 0.0f));
    const R xhat = V::Mul(V::Sub(LoadAny<V>(x + i, len, mean), vm), vs);
    StoreAny<V>(dx + i, V::Mul(vs, V::Sub(V::Sub(g, mean_g), V::Mul(xhat, mean_gx))), len);
  });
}

template <typename V>
void RmsNormForwardRowV(const float* x, const float* gamma, float* y, float* rstd, int64_t cols,
                        float eps) {
  using R = typename V::R;
  const float sq = SumRow<V>(x, cols, 0.0f, [](R v, int64_t) { return V::Mul(v, v); });
  const float s = 1.0f / std::sqrt(sq / static_cast<float>(cols) + eps);
  const R vs = V::Set1(s);
  ForLanes<V>(cols, [&](int64_t i, int64_t len) {
    const R out =
        V::Mul(V::Mul(LoadAny<V>(x + i, len, 0.0f), vs), LoadAny<V>(gamma + i, len, 0.0f));
    StoreAny<V>(y + i, out, len);
  });
  *rstd = s;
}

template <typename V>
void RmsNormBackwardRowV(const float* x, const float* gamma, float rstd, const float* dy, float* dx,
                         int64_t cols) {
  using R = typename V::R;
  const R vs = V::Set1(rstd);
  R acc = V::Set1(0.0f);
  ForLanes<V>(cols, [&](int64_t i, int64_t len) {
    const R g = V::Mul(LoadAny<V>(dy + i, len, 0.0f), LoadAny<V>(gamma + i, len, 0.0f));
    acc = V::Fma(g, V::Mul(LoadAny<V>(x + i, len, 0.0f), vs), acc);
  });
  const R mean_gx = V::Set1(V::SumLanes(acc) / static_cast<float>(cols));
  ForLanes<V>(cols, [&](int64_t i, int64_t len) {
    const R g = V::Mul(LoadAny<V>(dy + i, len, 0.0f), LoadAny<V>(gamma + i, len, 0.0f));
    const R xs = V::Mul(LoadAny<V>(x + i, len, 0.0f), vs);
    StoreAny<V>(dx + i, V::Mul(vs, V::Sub(g, V::Mul(xs, mean_gx))), len);
  });
}

template <typename V>
float LogSumExpRowV(const float* row, int64_t n) {
  using R = typename V::R;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  R vmax = V::Set1(kNegInf);
  ForLanes<V>(
      n, [&](int64_t i, int64_t len) { vmax = V::Max(vmax, LoadAny<V>(row + i, len, kNegInf)); });
  const float max = V::MaxLanes(vmax);
  const R shift = V::Set1(max);
  const float sum =
      SumRow<V>(row, n, kNegInf, [&](R v, int64_t) { return V::Exp(V::Sub(v, shift)); });
  return max + std::log(sum);
}

template <typename V>
void ScaledExpRowV(const float* row, float shift, float scale, float* out, int64_t n) {
  const auto vshift = V::Set1(shift), vscale = V::Set1(scale);
  ForLanes<V>(n, [&](int64_t i, int64_t len) {
    StoreAny<V>(out + i, V::Mul(vscale, V::Exp(V::Sub(LoadAny<V>(row + i, len, 0.0f), vshift))),
                len);
  });
}

// ---- Attention ----------------------------------------------------------------------------
//
// Keys are taken kLanes at a time (a key block), each block's keys transposed into lanes
// (kt[d][lane]) so that one FMA per head dimension advances a query row's kLanes scores. Query
// rows go kRows at a time, sharing each key block's loads. Per-thread scratch (a few hundred
// KiB at GPT-2's shapes) lives in thread_local vectors kept between calls, so nothing of
// [seq, seq] size is allocated or touched.

constexpr int kAttnRows = 4;

// kt[b][dd][lane] = rows[(b * kLanes + lane) * ld][dd] for key block b, 0 past seq.
template <typename V>
void PackTransposed(const float* rows, int64_t seq, int64_t dim, int64_t ld, float* kt) {
  const int64_t blocks = (seq + V::kLanes - 1) / V::kLanes;
  for (int64_t b = 0; b < blocks; ++b) {
    float* dst = kt + b * dim * V::kLanes;
    for (int lane = 0; lane < V::kLanes; ++lane) {
      const int64_t j = b * V::kLanes + lane;
      if (j < seq) {
        const float* src = rows + j * ld;
        for (int64_t dd = 0; dd < dim; ++dd) dst[dd * V::kLanes + lane] = src[dd];
      } else {
        for (int64_t dd = 0; dd < dim; ++dd) dst[dd * V::kLanes + lane] = 0.0f;
      }
    }
  }
}

// s[r] = q_r · (block's keys), r < rows, from kt (one key block, dim x kLanes).
template <typename V>
inline void BlockDots(const float* q, int64_t ld_q, int rows, const float* kt, int64_t dim,
                      typename V::R* s) {
  for (int r = 0; r < kAttnRows; ++r) s[r] = V::Set1(0.0f);
  if (rows == kAttnRows) {
    const float* q0 = q;
    const float* q1 = q + ld_q;
    const float* q2 = q + 2 * ld_q;
    const float* q3 = q + 3 * ld_q;
    for (int64_t dd = 0; dd < dim; ++dd) {
      const auto kv = V::Load(kt + dd * V::kLanes);
      s[0] = V::Fma(V::Set1(q0[dd]), kv, s[0]);
      s[1] = V::Fma(V::Set1(q1[dd]), kv, s[1]);
      s[2] = V::Fma(V::Set1(q2[dd]), kv, s[2]);
      s[3] = V::Fma(V::Set1(q3[dd]), kv, s[3]);
    }
    return;
  }
  for (int64_t dd = 0; dd < dim; ++dd) {
    const auto kv = V::Load(kt + dd * V::kLanes);
    for (int r = 0; r < rows; ++r) s[r] = V::Fma(V::Set1(q[r * ld_q + dd]), kv, s[r]);
  }
}

template <typename V>
void AttentionForwardHeadV(const float* q, const float* k, const float* v, float* out, float* lse,
                           int64_t seq, int64_t dim, int64_t ld_q, int64_t ld_kv, float scale) {
  using R = typename V::R;
  constexpr int L = V::kLanes;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t blocks = (seq + L - 1) / L;
  thread_local std::vector<float> kt_buffer, acc_buffer;
  kt_buffer.resize(blocks * dim * L);
  acc_buffer.resize(kAttnRows * dim);
  float* kt = kt_buffer.data();
  float* acc = acc_buffer.data();
  PackTransposed<V>(k, seq, dim, ld_kv, kt);
  const R vscale = V::Set1(scale);
  alignas(64) float p[kAttnRows][L] = {};
  for (int64_t i0 = 0; i0 < seq; i0 += kAttnRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kAttnRows, seq - i0));
    float m[kAttnRows], l[kAttnRows];
    for (int r = 0; r < rows; ++r) {
      m[r] = kNegInf;
      l[r] = 0.0f;
    }
    std::fill(acc, acc + rows * dim, 0.0f);
    const int64_t last_key = i0 + rows - 1;
    for (int64_t b = 0; b * L <= last_key; ++b) {
      const int64_t j0 = b * L;
      R s[kAttnRows];
      BlockDots<V>(q + i0 * ld_q, ld_q, rows, kt + b * dim * L, dim, s);
      for (int r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        if (j0 > i) {
          for (int lane = 0; lane < L; ++lane) p[r][lane] = 0.0f;
          continue;
        }
        // Keys j <= i are this row's; the rest (and the pad past seq) get -inf.
        const R sr = V::Select(V::LanesBelow(i - j0 + 1), V::Mul(s[r], vscale), V::Set1(kNegInf));
        const float m_new = std::max(m[r], V::MaxLanes(sr));
        const R pr = V::Exp(V::Sub(sr, V::Set1(m_new)));
        V::Store(p[r], pr);
        const float correction = std::exp(m[r] - m_new);
        l[r] = l[r] * correction + V::SumLanes(pr);
        m[r] = m_new;
        if (correction != 1.0f) {
          float* a = acc + r * dim;
          for (int64_t c = 0; c < dim; ++c) a[c] *= correction;
        }
      }
      const int64_t keys = std::min<int64_t>(L, std::min(seq, last_key + 1) - j0);
      // acc[r] += sum over the block's keys of p[r][jj] * v_j, a chunk of kLanes columns at a
      // time with the rows' accumulators in registers.
      ForLanes<V>(dim, [&](int64_t c, int64_t len) {
        R a[kAttnRows];
        for (int r = 0; r < kAttnRows; ++r) {
          a[r] = r < rows ? LoadAny<V>(acc + r * dim + c, len, 0.0f) : V::Set1(0.0f);
        }
        for (int64_t jj = 0; jj < keys; ++jj) {
          const R vj = LoadAny<V>(v + (j0 + jj) * ld_kv + c, len, 0.0f);
          for (int r = 0; r < kAttnRows; ++r) a[r] = V::Fma(V::Set1(p[r][jj]), vj, a[r]);
        }
        for (int r = 0; r < rows; ++r) StoreAny<V>(acc + r * dim + c, a[r], len);
      });
    }
    for (int r = 0; r < rows; ++r) {
      const float inv = 1.0f / l[r];
      float* o = out + (i0 + r) * ld_q;
      const float* a = acc + r * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] = a[c] * inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

template <typename V>
void AttentionBackwardGroupV(const float* q, const float* k, const float* v, const float* out,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv,
                             int64_t group, int64_t q_stride, int64_t seq, int64_t dim,
                             int64_t ld_q, int64_t ld_kv, float scale) {
  using R = typename V::R;
  constexpr int L = V::kLanes;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t blocks = (seq + L - 1) / L;
  thread_local std::vector<float> kt_buffer, vt_buffer, dk_buffer, dv_buffer, dq_buffer;
  kt_buffer.resize(blocks * dim * L);
  vt_buffer.resize(blocks * dim * L);
  dk_buffer.assign(seq * dim, 0.0f);
  dv_buffer.assign(seq * dim, 0.0f);
  dq_buffer.resize(kAttnRows * dim);
  float* kt = kt_buffer.data();
  float* vt = vt_buffer.data();
  float* dk_acc = dk_buffer.data();
  float* dv_acc = dv_buffer.data();
  float* dq_acc = dq_buffer.data();
  PackTransposed<V>(k, seq, dim, ld_kv, kt);
  PackTransposed<V>(v, seq, dim, ld_kv, vt);
  const R vscale = V::Set1(scale);
  alignas(64) float p[kAttnRows][L] = {};
  alignas(64) float ds[kAttnRows][L] = {};
  for (int64_t h = 0; h < group; ++h) {
    const float* qh = q + h * q_stride;
    const float* oh = out + h * q_stride;
    const float* doh = dout + h * q_stride;
    float* dqh = dq + h * q_stride;
    const float* lse_h = lse + h * seq;
    for (int64_t i0 = 0; i0 < seq; i0 += kAttnRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kAttnRows, seq - i0));
      float delta[kAttnRows];
      for (int r = 0; r < rows; ++r) {
        const float* o_i = oh + (i0 + r) * ld_q;
        const float* do_i = doh + (i0 + r) * ld_q;
        // In BlockDots' order and rounding, so that where a row's only key has P = 1 (out = v),
        // dP - D is exactly 0.
        float dot = 0.0f;
        for (int64_t c = 0; c < dim; ++c) dot = std::fma(do_i[c], o_i[c], dot);
        delta[r] = dot;
      }
      std::fill(dq_acc, dq_acc + rows * dim, 0.0f);
      for (int r = rows; r < kAttnRows; ++r) {
        std::fill(p[r], p[r] + L, 0.0f);
        std::fill(ds[r], ds[r] + L, 0.0f);
      }
      const int64_t last_key = i0 + rows - 1;
      for (int64_t b = 0; b * L <= last_key; ++b) {
        const int64_t j0 = b * L;
        R s[kAttnRows], dp[kAttnRows];
        BlockDots<V>(qh + i0 * ld_q, ld_q, rows, kt + b * dim * L, dim, s);
        BlockDots<V>(doh + i0 * ld_q, ld_q, rows, vt + b * dim * L, dim, dp);
        for (int r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          if (j0 > i) {
            for (int lane = 0; lane < L; ++lane) p[r][lane] = ds[r][lane] = 0.0f;
            continue;
          }
          const R sr = V::Select(V::LanesBelow(i - j0 + 1), V::Mul(s[r], vscale), V::Set1(kNegInf));
          const R pr = V::Exp(V::Sub(sr, V::Set1(lse_h[i])));
          V::Store(p[r], pr);
          V::Store(ds[r], V::Mul(pr, V::Sub(dp[r], V::Set1(delta[r]))));
        }
        const int64_t keys = std::min<int64_t>(L, std::min(seq, last_key + 1) - j0);
        // Per chunk of kLanes columns: dq[r] += dS[r][j] k_j with dq in registers; dk_j +=
        // sum_r dS[r][j] q_r and dv_j += sum_r P[r][j] dout_r with the rows' q and dout in
        // registers. Rows past `rows` have P = dS = 0 and read row 0.
        ForLanes<V>(dim, [&](int64_t c, int64_t len) {
          R dqr[kAttnRows], qr[kAttnRows], dor[kAttnRows];
          for (int r = 0; r < kAttnRows; ++r) {
            const int64_t i = i0 + (r < rows ? r : 0);
            dqr[r] = r < rows ? LoadAny<V>(dq_acc + r * dim + c, len, 0.0f) : V::Set1(0.0f);
            qr[r] = LoadAny<V>(qh + i * ld_q + c, len, 0.0f);
            dor[r] = LoadAny<V>(doh + i * ld_q + c, len, 0.0f);
          }
          for (int64_t jj = 0; jj < keys; ++jj) {
            const int64_t j = j0 + jj;
            const R kj = LoadAny<V>(k + j * ld_kv + c, len, 0.0f);
            R dkj = LoadAny<V>(dk_acc + j * dim + c, len, 0.0f);
            R dvj = LoadAny<V>(dv_acc + j * dim + c, len, 0.0f);
            for (int r = 0; r < kAttnRows; ++r) {
              const R dsr = V::Set1(ds[r][jj]);
              dqr[r] = V::Fma(dsr, kj, dqr[r]);
              dkj = V::Fma(dsr, qr[r], dkj);
              dvj = V::Fma(V::Set1(p[r][jj]), dor[r], dvj);
            }
            StoreAny<V>(dk_acc + j * dim + c, dkj, len);
            StoreAny<V>(dv_acc + j * dim + c, dvj, len);
          }
          for (int r = 0; r < rows; ++r) StoreAny<V>(dq_acc + r * dim + c, dqr[r], len);
        });
      }
      for (int r = 0; r < rows; ++r) {
        float* dq_i = dqh + (i0 + r) * ld_q;
        const float* a = dq_acc + r * dim;
        for (int64_t c = 0; c < dim; ++c) dq_i[c] = scale * a[c];
      }
    }
  }
  for (int64_t j = 0; j < seq; ++j) {
    for (int64_t c = 0; c < dim; ++c) {
      dk[j * ld_kv + c] = scale * dk_acc[j * dim + c];
      dv[j * ld_kv + c] = dv_acc[j * dim + c];
    }
  }
}

template <typename V>
OpsVectorVariant MakeOpsVectorVariant(Isa isa) {
  return {.isa = isa,
          .gelu_forward = GeluForwardV<V>,
          .gelu_backward = GeluBackwardV<V>,
          .swiglu_forward = SwiGluForwardV<V>,
          .swiglu_backward = SwiGluBackwardV<V>,
          .layernorm_forward_row = LayerNormForwardRowV<V>,
          .layernorm_backward_row = LayerNormBackwardRowV<V>,
          .rmsnorm_forward_row = RmsNormForwardRowV<V>,
          .rmsnorm_backward_row = RmsNormBackwardRowV<V>,
          .logsumexp_row = LogSumExpRowV<V>,
          .scaled_exp_row = ScaledExpRowV<V>,
          .attention_forward_head = AttentionForwardHeadV<V>,
          .attention_backward_group = AttentionBackwardGroupV<V>};
}

}  // namespace
}  // namespace sluice::kernels::cpu::internal
