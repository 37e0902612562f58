#include "kernels/ref/ops_attention.h"

#include <cmath>
#include <sstream>

#include "kernels/ref/ops_common.h"

namespace sluice::kernels {

std::string AttentionDimsError(const AttentionDims& d) {
  std::ostringstream out;
  if (d.batch < 0 || d.seq < 0) {
    out << "batch = " << d.batch << " and seq = " << d.seq << " must be >= 0";
  } else if (d.q_heads <= 0 || d.kv_heads <= 0 || d.head_dim <= 0) {
    out << "q_heads = " << d.q_heads << ", kv_heads = " << d.kv_heads
        << " and head_dim = " << d.head_dim << " must be > 0";
  } else if (d.q_heads % d.kv_heads != 0) {
    out << "q_heads = " << d.q_heads << " is not a multiple of kv_heads = " << d.kv_heads;
  }
  return out.str();
}

int64_t AttentionWorkspaceElements(const AttentionDims& dims) {
  return 2 * dims.seq * dims.seq + dims.seq;
}

}  // namespace sluice::kernels

namespace sluice::kernels::ref {
namespace {

void CheckDims(const AttentionDims& dims, const char* op) {
  const std::string error = AttentionDimsError(dims);
  if (!error.empty()) internal::OpsFail(op, "%s", error.c_str());
}

// Strided views of one (batch, head) slice: element (token t, dim d).
template <typename T>
struct HeadView {
  T* base;
  int64_t stride;
  T& operator()(int64_t t, int64_t d) const { return base[t * stride + d]; }
};

template <typename T>
HeadView<T> View(T* tensor, const AttentionDims& dims, int64_t b, int64_t h, int64_t heads) {
  const int64_t stride = heads * dims.head_dim;
  return {tensor + b * dims.seq * stride + h * dims.head_dim, stride};
}

// p [seq, seq] row-major: P_ij = exp(scale * q_i . k_j - lse_i) for j <= i, 0 above the diagonal.
template <typename T>
void Probabilities(HeadView<const T> qh, HeadView<const T> kh, const T* lse_h, T scale, int64_t seq,
                   int64_t head_dim, T* p) {
  for (int64_t i = 0; i < seq; ++i) {
    for (int64_t j = 0; j < seq; ++j) {
      if (j > i) {
        p[i * seq + j] = 0;
        continue;
      }
      T dot = 0;
      for (int64_t d = 0; d < head_dim; ++d) dot += qh(i, d) * kh(j, d);
      p[i * seq + j] = std::exp(scale * dot - lse_h[i]);
    }
  }
}

}  // namespace

template <typename T>
void AttentionForward(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionDims& dims,
                      T* workspace) {
  CheckDims(dims, "AttentionForward");
  const int64_t seq = dims.seq;
  const int64_t dim = dims.head_dim;
  const int64_t group = dims.q_heads / dims.kv_heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(dim));
  T* s = workspace;  // one row of scores
  for (int64_t b = 0; b < dims.batch; ++b) {
    for (int64_t h = 0; h < dims.q_heads; ++h) {
      const HeadView<const T> qh = View(q, dims, b, h, dims.q_heads);
      const HeadView<const T> kh = View(k, dims, b, h / group, dims.kv_heads);
      const HeadView<const T> vh = View(v, dims, b, h / group, dims.kv_heads);
      const HeadView<T> oh = View(out, dims, b, h, dims.q_heads);
      T* lse_h = lse + (b * dims.q_heads + h) * seq;
      for (int64_t i = 0; i < seq; ++i) {
        T max = 0;
        for (int64_t j = 0; j <= i; ++j) {
          T dot = 0;
          for (int64_t d = 0; d < dim; ++d) dot += qh(i, d) * kh(j, d);
          s[j] = scale * dot;
          max = j == 0 || s[j] > max ? s[j] : max;
        }
        T sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - max);
        lse_h[i] = max + std::log(sum);
        for (int64_t d = 0; d < dim; ++d) {
          T acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += std::exp(s[j] - lse_h[i]) * vh(j, d);
          oh(i, d) = acc;
        }
      }
    }
  }
}

template <typename T>
void AttentionBackward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                       const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims,
                       T* workspace) {
  CheckDims(dims, "AttentionBackward");
  const int64_t seq = dims.seq;
  const int64_t dim = dims.head_dim;
  const int64_t group = dims.q_heads / dims.kv_heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(dim));
  T* p = workspace;
  T* ds = workspace + seq * seq;
  T* delta = workspace + 2 * seq * seq;
  const int64_t kv_count = dims.batch * seq * dims.kv_heads * dim;
  for (int64_t i = 0; i < kv_count; ++i) {
    dk[i] = 0;
    dv[i] = 0;
  }
  for (int64_t b = 0; b < dims.batch; ++b) {
    for (int64_t h = 0; h < dims.q_heads; ++h) {
      const HeadView<const T> qh = View(q, dims, b, h, dims.q_heads);
      const HeadView<const T> kh = View(k, dims, b, h / group, dims.kv_heads);
      const HeadView<const T> vh = View(v, dims, b, h / group, dims.kv_heads);
      const HeadView<const T> oh = View(out, dims, b, h, dims.q_heads);
      const HeadView<const T> doh = View(dout, dims, b, h, dims.q_heads);
      const HeadView<T> dqh = View(dq, dims, b, h, dims.q_heads);
      const HeadView<T> dkh = View(dk, dims, b, h / group, dims.kv_heads);
      const HeadView<T> dvh = View(dv, dims, b, h / group, dims.kv_heads);
      Probabilities(qh, kh, lse + (b * dims.q_heads + h) * seq, scale, seq, dim, p);
      for (int64_t i = 0; i < seq; ++i) {
        delta[i] = 0;
        for (int64_t d = 0; d < dim; ++d) delta[i] += doh(i, d) * oh(i, d);
      }
      for (int64_t i = 0; i < seq; ++i) {
        for (int64_t j = 0; j < seq; ++j) {
          T dp = 0;
          for (int64_t d = 0; d < dim; ++d) dp += doh(i, d) * vh(j, d);
          ds[i * seq + j] = p[i * seq + j] * (dp - delta[i]);
        }
      }
      for (int64_t i = 0; i < seq; ++i) {
        for (int64_t d = 0; d < dim; ++d) {
          T acc = 0;
          for (int64_t j = 0; j < seq; ++j) acc += ds[i * seq + j] * kh(j, d);
          dqh(i, d) = scale * acc;
        }
      }
      for (int64_t j = 0; j < seq; ++j) {
        for (int64_t d = 0; d < dim; ++d) {
          T acc_k = 0;
          T acc_v = 0;
          for (int64_t i = 0; i < seq; ++i) {
            acc_k += ds[i * seq + j] * qh(i, d);
            acc_v += p[i * seq + j] * doh(i, d);
          }
          dkh(j, d) += scale * acc_k;
          dvh(j, d) += acc_v;
        }
      }
    }
  }
}

#define SLUICE_INSTANTIATE(T)                                                                    \
  template void AttentionForward<T>(const T*, const T*, const T*, T*, T*, const AttentionDims&,  \
                                    T*);                                                         \
  template void AttentionBackward<T>(const T*, const T*, const T*, const T*, const T*, const T*, \
                                     T*, T*, T*, const AttentionDims&, T*);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::ref
