#include "runtime/ops/ref/ref_ops_backend.h"

#include "kernels/ref/adam_ref.h"
#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_attention.h"
#include "kernels/ref/ops_convert.h"
#include "kernels/ref/ops_elementwise.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_linear.h"
#include "kernels/ref/ops_loss.h"
#include "kernels/ref/ops_norm.h"
#include "kernels/ref/ops_rope.h"
#include "runtime/ops/host_ops_backend.h"

namespace sluice::ops {
namespace {

namespace kr = kernels::ref;

// kernels/ref instantiated for double: the fp64 reference every other column is measured
// against, and what the finite-difference tests differentiate. Adam is the scalar fp32
// reference (its master state is fp32 by definition).
struct RefKernels {
  using T = double;
  static constexpr DType kCompute = DType::kF64;
  static constexpr std::string_view kName = "ref";

  static void LinearForward(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t in,
                            int64_t out) {
    kr::LinearForward(x, w, b, y, rows, in, out);
  }
  static void LinearBackward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                             int64_t rows, int64_t in, int64_t out) {
    kr::LinearBackward(x, w, dy, dx, dw, db, rows, in, out);
  }
  static void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t n,
                               int64_t vocab, int64_t dim) {
    kr::EmbeddingForward(tokens, table, out, n, vocab, dim);
  }
  static void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t n,
                                int64_t vocab, int64_t dim) {
    kr::EmbeddingBackward(tokens, dout, dtable, n, vocab, dim);
  }
  static void PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq,
                                       int64_t positions, int64_t dim) {
    kr::PositionEmbeddingForward(wpe, x, batch, seq, positions, dim);
  }
  static void PositionEmbeddingBackward(const T* dx, T* dwpe, int64_t batch, int64_t seq,
                                        int64_t positions, int64_t dim) {
    kr::PositionEmbeddingBackward(dx, dwpe, batch, seq, positions, dim);
  }
  static void AttentionForward(const T* q, const T* k, const T* v, T* out, T* lse,
                               const kernels::AttentionDims& d, T* ws) {
    kr::AttentionForward(q, k, v, out, lse, d, ws);
  }
  static void AttentionBackward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                                const T* dout, T* dq, T* dk, T* dv,
                                const kernels::AttentionDims& d, T* ws) {
    kr::AttentionBackward(q, k, v, out, lse, dout, dq, dk, dv, d, ws);
  }
  static T CrossEntropyForward(const T* logits, const int32_t* targets, T* lse, int64_t rows,
                               int64_t vocab) {
    return kr::CrossEntropyForward(logits, targets, lse, rows, vocab);
  }
  static void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                                   T* dlogits, int64_t rows, int64_t vocab) {
    kr::CrossEntropyBackward(logits, targets, lse, dloss, dlogits, rows, vocab);
  }
  static void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                               int64_t rows, int64_t cols, float eps) {
    kr::LayerNormForward(x, gamma, beta, y, mean, rstd, rows, cols, eps);
  }
  static void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd,
                                const T* dy, T* dx, T* dgamma, T* dbeta, int64_t rows,
                                int64_t cols) {
    kr::LayerNormBackward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols);
  }
  static void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int64_t rows,
                             int64_t cols, float eps) {
    kr::RmsNormForward(x, gamma, y, rstd, rows, cols, eps);
  }
  static void RmsNormBackward(const T* x, const T* gamma, const T* rstd, const T* dy, T* dx,
                              T* dgamma, int64_t rows, int64_t cols) {
    kr::RmsNormBackward(x, gamma, rstd, dy, dx, dgamma, rows, cols);
  }
  static void GeluForward(const T* x, T* y, int64_t n) { kr::GeluForward(x, y, n); }
  static void GeluBackward(const T* x, const T* dy, T* dx, int64_t n) {
    kr::GeluBackward(x, dy, dx, n);
  }
  static void SwiGluForward(const T* gate, const T* up, T* y, int64_t n) {
    kr::SwiGluForward(gate, up, y, n);
  }
  static void SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup,
                             int64_t n) {
    kr::SwiGluBackward(gate, up, dy, dgate, dup, n);
  }
  static void RopeForward(const T* x, T* y, int64_t b, int64_t s, int64_t h, int64_t d,
                          float theta) {
    kr::RopeForward(x, y, b, s, h, d, theta);
  }
  static void RopeBackward(const T* dy, T* dx, int64_t b, int64_t s, int64_t h, int64_t d,
                           float theta) {
    kr::RopeBackward(dy, dx, b, s, h, d, theta);
  }
  static void Add(const T* a, const T* b, T* y, int64_t n) { kr::Add(a, b, y, n); }
  static void Accumulate(const T* x, T* y, int64_t n) { kr::Accumulate(x, y, n); }
  static void ScaleF32(float* y, float s, int64_t n) { kr::Scale(y, s, n); }
  static void AdamStep(const kernels::AdamTensors& t, const kernels::AdamHyperparams& hyper,
                       float grad_scale) {
    kernels::AdamStepReference(t, hyper, grad_scale);
  }
  static void ConvertF32ToBf16(const float* x, uint16_t* y, int64_t n) {
    kr::ConvertF32ToBf16(x, y, n);
  }
  static void ConvertF32ToF16(const float* x, uint16_t* y, int64_t n) {
    kr::ConvertF32ToF16(x, y, n);
  }
  static void ConvertBf16ToF32(const uint16_t* x, float* y, int64_t n) {
    kr::ConvertBf16ToF32(x, y, n);
  }
  static void ConvertF16ToF32(const uint16_t* x, float* y, int64_t n) {
    kr::ConvertF16ToF32(x, y, n);
  }
};

}  // namespace

std::unique_ptr<OpsBackend> CreateRefOpsBackend(Device& device) {
  return std::make_unique<internal::HostOpsBackend<RefKernels>>(device);
}

}  // namespace sluice::ops
