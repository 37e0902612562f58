#include "runtime/ops/cpu/cpu_ops_backend.h"

#include "kernels/cpu/adam.h"
#include "kernels/cpu/ops_activation.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_convert.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_linear.h"
#include "kernels/cpu/ops_loss.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_rope.h"
#include "runtime/ops/host_ops_backend.h"

namespace sluice::ops {
namespace {

namespace kc = kernels::cpu;

// kernels/cpu behind the signatures HostOpsBackend expects. f32 only: the CPU kernels have no
// 16-bit compute path (bf16 compute is Unimplemented here, by Supports()).
struct CpuKernels {
  using T = float;
  static constexpr DType kCompute = DType::kF32;
  static constexpr std::string_view kName = "cpu";
  int threads = 0;  // OpenMP team size of each op; 0: OpenMP's default

  void LinearForward(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t in,
                     int64_t out) const {
    kc::LinearForward(x, w, b, y, rows, in, out, threads);
  }
  void LinearBackward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int64_t rows,
                      int64_t in, int64_t out) const {
    kc::LinearBackward(x, w, dy, dx, dw, db, rows, in, out, threads);
  }
  void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t n, int64_t vocab,
                        int64_t dim) const {
    kc::EmbeddingForward(tokens, table, out, n, vocab, dim, threads);
  }
  void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable, int64_t n, int64_t vocab,
                         int64_t dim) const {
    kc::EmbeddingBackward(tokens, dout, dtable, n, vocab, dim, threads);
  }
  void PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq, int64_t positions,
                                int64_t dim) const {
    kc::PositionEmbeddingForward(wpe, x, batch, seq, positions, dim, threads);
  }
  void PositionEmbeddingBackward(const T* dx, T* dwpe, int64_t batch, int64_t seq,
                                 int64_t positions, int64_t dim) const {
    kc::PositionEmbeddingBackward(dx, dwpe, batch, seq, positions, dim, threads);
  }
  void AttentionForward(const T* q, const T* k, const T* v, T* out, T* lse,
                        const kernels::AttentionDims& d, T* ws) const {
    kc::AttentionForward(q, k, v, out, lse, d, ws, threads);
  }
  void AttentionBackward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                         const T* dout, T* dq, T* dk, T* dv, const kernels::AttentionDims& d,
                         T* ws) const {
    kc::AttentionBackward(q, k, v, out, lse, dout, dq, dk, dv, d, ws, threads);
  }
  T CrossEntropyForward(const T* logits, const int32_t* targets, T* lse, int64_t rows,
                        int64_t vocab) const {
    return kc::CrossEntropyForward(logits, targets, lse, rows, vocab, threads);
  }
  void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                            T* dlogits, int64_t rows, int64_t vocab) const {
    kc::CrossEntropyBackward(logits, targets, lse, dloss, dlogits, rows, vocab, threads);
  }
  void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                        int64_t rows, int64_t cols, float eps) const {
    kc::LayerNormForward(x, gamma, beta, y, mean, rstd, rows, cols, eps, threads);
  }
  void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy,
                         T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t cols) const {
    kc::LayerNormBackward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols, threads);
  }
  void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int64_t rows, int64_t cols,
                      float eps) const {
    kc::RmsNormForward(x, gamma, y, rstd, rows, cols, eps, threads);
  }
  void RmsNormBackward(const T* x, const T* gamma, const T* rstd, const T* dy, T* dx, T* dgamma,
                       int64_t rows, int64_t cols) const {
    kc::RmsNormBackward(x, gamma, rstd, dy, dx, dgamma, rows, cols, threads);
  }
  void GeluForward(const T* x, T* y, int64_t n) const { kc::GeluForward(x, y, n, threads); }
  void GeluBackward(const T* x, const T* dy, T* dx, int64_t n) const {
    kc::GeluBackward(x, dy, dx, n, threads);
  }
  void SwiGluForward(const T* gate, const T* up, T* y, int64_t n) const {
    kc::SwiGluForward(gate, up, y, n, threads);
  }
  void SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n) const {
    kc::SwiGluBackward(gate, up, dy, dgate, dup, n, threads);
  }
  void RopeForward(const T* x, T* y, int64_t b, int64_t s, int64_t h, int64_t d,
                   float theta) const {
    kc::RopeForward(x, y, b, s, h, d, theta, threads);
  }
  void RopeBackward(const T* dy, T* dx, int64_t b, int64_t s, int64_t h, int64_t d,
                    float theta) const {
    kc::RopeBackward(dy, dx, b, s, h, d, theta, threads);
  }
  void Add(const T* a, const T* b, T* y, int64_t n) const { kc::Add(a, b, y, n, threads); }
  void Accumulate(const T* x, T* y, int64_t n) const { kc::Accumulate(x, y, n, threads); }
  void ScaleF32(float* y, float s, int64_t n) const { kc::Scale(y, s, n, threads); }
  void AdamStep(const kernels::AdamTensors& t, const kernels::AdamHyperparams& hyper,
                float grad_scale) const {
    kernels::AdamStep(t, hyper, grad_scale, {.num_threads = threads});
  }
  void ConvertF32ToBf16(const float* x, uint16_t* y, int64_t n) const {
    kc::ConvertF32ToBf16(x, y, n, threads);
  }
  void ConvertF32ToF16(const float* x, uint16_t* y, int64_t n) const {
    kc::ConvertF32ToF16(x, y, n, threads);
  }
  void ConvertBf16ToF32(const uint16_t* x, float* y, int64_t n) const {
    kc::ConvertBf16ToF32(x, y, n, threads);
  }
  void ConvertF16ToF32(const uint16_t* x, float* y, int64_t n) const {
    kc::ConvertF16ToF32(x, y, n, threads);
  }
};

}  // namespace

std::unique_ptr<OpsBackend> CreateCpuOpsBackend(Device& device, int threads) {
  return std::make_unique<internal::HostOpsBackend<CpuKernels>>(device,
                                                                CpuKernels{.threads = threads});
}

}  // namespace sluice::ops
