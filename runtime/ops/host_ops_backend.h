// The ops backends that run their kernels on the host, as host functions enqueued on the stream
// (Device::LaunchHostFunc): runtime/ops/cpu (kernels/cpu, f32) and runtime/ops/ref (kernels/ref,
// f64). Both columns differ only in their kernel set K, so the launch code is written once here.
//
// K provides: `using T` (the compute type), `kCompute` (its DType), `kName`, and functions with
// kernels/ref's signatures for the layer ops, plus AdamStep, the four 16-bit conversions and
// ScaleF32 (the flat ops take f32 tensors on every column). The
// backend keeps one K value and each launch captures a copy of it: K's members are the column's
// settings (the CPU column's OpenMP team size). Every host function reads and writes device memory
// only from the stream's worker, never from the enqueuing thread.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kernels/ref/half.h"
#include "kernels/ref/ops_attention.h"
#include "kernels/ref/ops_elementwise.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_loss.h"
#include "kernels/ref/ops_vocab_shard.h"
#include "runtime/ops/block_squared_sums.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/ops/scratch_pool.h"

namespace sluice::ops::internal {

// Element i of a float array of any DType, widened to double (exactly).
inline double LoadElement(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF64:
      return static_cast<const double*>(data)[i];
    case DType::kBF16:
      return kernels::Bf16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16:
      return kernels::F16ToF32(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0;
}

// Stores value rounded to dtype (16-bit types through fp32, as kernels/ref/half.h rounds).
inline void StoreElement(void* data, DType dtype, int64_t i, double value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[i] = static_cast<float>(value);
      return;
    case DType::kF64:
      static_cast<double*>(data)[i] = value;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[i] = kernels::F32ToBf16(static_cast<float>(value));
      return;
    case DType::kF16:
      static_cast<uint16_t*>(data)[i] = kernels::F32ToF16(static_cast<float>(value));
      return;
  }
}

template <typename K>
class HostOpsBackend : public OpsBackend {
 public:
  using T = typename K::T;

  explicit HostOpsBackend(Device& device, K kernels = K())
      : OpsBackend(device), kernels_(kernels), scratch_(device) {}

  std::string_view name() const override { return K::kName; }
  bool Supports(DType compute) const override { return compute == K::kCompute; }
  void ReleaseScratch(Stream& stream) override { scratch_.Release(stream); }

 protected:
  static T* P(const Tensor& t) { return IsAbsent(t) ? nullptr : static_cast<T*>(t.raw_data()); }
  static float* F(const Tensor& t) {
    return IsAbsent(t) ? nullptr : static_cast<float*>(t.raw_data());
  }
  static int64_t Last(const Tensor& t) { return t.dim(t.rank() - 1); }
  static int64_t Rows(const Tensor& t) {
    const int64_t last = Last(t);
    return last == 0 ? 0 : t.numel() / last;
  }

  // Enqueues fn on the stream's worker. fn returns a Status, or nothing where it cannot fail.
  template <typename Fn>
  Status Launch(Stream& stream, std::string_view op, Fn&& fn) {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
      return device().LaunchHostFunc(
          stream,
          [fn = std::forward<Fn>(fn)]() mutable {
            fn();
            return OkStatus();
          },
          op);
    } else {
      return device().LaunchHostFunc(stream, std::forward<Fn>(fn), op);
    }
  }

  Status DoLinearForward(Stream& s, const LinearForwardArgs& a) override {
    const T *x = P(a.x), *w = P(a.w), *b = P(a.b);
    T* y = P(a.y);
    const int64_t rows = Rows(a.x), in = Last(a.x), out = a.w.dim(0);
    return Launch(s, "LinearForward",
                  [=, kset = kernels_] { kset.LinearForward(x, w, b, y, rows, in, out); });
  }
  Status DoLinearBackward(Stream& s, const LinearBackwardArgs& a) override {
    const T *x = P(a.x), *w = P(a.w), *dy = P(a.dy);
    T *dx = P(a.dx), *dw = P(a.dw), *db = P(a.db);
    const int64_t rows = Rows(a.x), in = Last(a.x), out = a.w.dim(0);
    return Launch(s, "LinearBackward", [=, kset = kernels_] {
      kset.LinearBackward(x, w, dy, dx, dw, db, rows, in, out);
    });
  }
  Status DoEmbeddingForward(Stream& s, const EmbeddingForwardArgs& a) override {
    const int32_t* tokens = a.tokens.data;
    int32_t* flag = a.invalid_token;
    const T* table = P(a.table);
    T* out = P(a.out);
    const int64_t n = a.tokens.count, vocab = a.table.dim(0), dim = a.table.dim(1);
    if (a.shard.piece()) {
      // A piece of the vocabulary (tensor parallelism): the scalar kernel on both columns.
      const int64_t start = a.shard.start, whole = a.shard.vocab;
      return Launch(s, "EmbeddingForward", [=]() -> Status {
        SLUICE_RETURN_IF_ERROR(CheckTokens("EmbeddingForward", tokens, n, whole, flag));
        kernels::ref::EmbeddingShardForward<T>(tokens, table, out, n, start, vocab, dim);
        return OkStatus();
      });
    }
    return Launch(s, "EmbeddingForward", [=, kset = kernels_]() -> Status {
      SLUICE_RETURN_IF_ERROR(CheckTokens("EmbeddingForward", tokens, n, vocab, flag));
      kset.EmbeddingForward(tokens, table, out, n, vocab, dim);
      return OkStatus();
    });
  }
  Status DoEmbeddingBackward(Stream& s, const EmbeddingBackwardArgs& a) override {
    const int32_t* tokens = a.tokens.data;
    int32_t* flag = a.invalid_token;
    const T* dout = P(a.dout);
    T* dtable = P(a.dtable);
    const int64_t n = a.tokens.count, vocab = a.dtable.dim(0), dim = a.dtable.dim(1);
    if (a.shard.piece()) {
      const int64_t start = a.shard.start, whole = a.shard.vocab;
      return Launch(s, "EmbeddingBackward", [=]() -> Status {
        SLUICE_RETURN_IF_ERROR(CheckTokens("EmbeddingBackward", tokens, n, whole, flag));
        kernels::ref::EmbeddingShardBackward<T>(tokens, dout, dtable, n, start, vocab, dim);
        return OkStatus();
      });
    }
    return Launch(s, "EmbeddingBackward", [=, kset = kernels_]() -> Status {
      SLUICE_RETURN_IF_ERROR(CheckTokens("EmbeddingBackward", tokens, n, vocab, flag));
      kset.EmbeddingBackward(tokens, dout, dtable, n, vocab, dim);
      return OkStatus();
    });
  }
  Status DoPositionEmbeddingForward(Stream& s, const PositionEmbeddingForwardArgs& a) override {
    const T* wpe = P(a.wpe);
    T* x = P(a.x);
    const int64_t batch = a.x.dim(0), seq = a.x.dim(1), dim = a.x.dim(2), positions = a.wpe.dim(0);
    return Launch(s, "PositionEmbeddingForward", [=, kset = kernels_] {
      kset.PositionEmbeddingForward(wpe, x, batch, seq, positions, dim);
    });
  }
  Status DoPositionEmbeddingBackward(Stream& s, const PositionEmbeddingBackwardArgs& a) override {
    const T* dx = P(a.dx);
    T* dwpe = P(a.dwpe);
    const int64_t batch = a.dx.dim(0), seq = a.dx.dim(1), dim = a.dx.dim(2),
                  positions = a.dwpe.dim(0);
    return Launch(s, "PositionEmbeddingBackward", [=, kset = kernels_] {
      kset.PositionEmbeddingBackward(dx, dwpe, batch, seq, positions, dim);
    });
  }
  static kernels::AttentionDims Dims(const Tensor& q, const Tensor& k) {
    return {.batch = q.dim(0),
            .seq = q.dim(1),
            .q_heads = q.dim(2),
            .kv_heads = k.dim(2),
            .head_dim = q.dim(3)};
  }
  Status DoAttentionForward(Stream& s, const AttentionForwardArgs& a) override {
    const kernels::AttentionDims d = Dims(a.q, a.k);
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, WorkspaceBytes(d)));
    const T *q = P(a.q), *k = P(a.k), *v = P(a.v);
    T *out = P(a.out), *lse = P(a.lse), *workspace = static_cast<T*>(ws);
    return Launch(s, "AttentionForward",
                  [=, kset = kernels_] { kset.AttentionForward(q, k, v, out, lse, d, workspace); });
  }
  Status DoAttentionBackward(Stream& s, const AttentionBackwardArgs& a) override {
    const kernels::AttentionDims d = Dims(a.q, a.k);
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, WorkspaceBytes(d)));
    const T *q = P(a.q), *k = P(a.k), *v = P(a.v), *out = P(a.out), *lse = P(a.lse),
            *dout = P(a.dout);
    T *dq = P(a.dq), *dk = P(a.dk), *dv = P(a.dv), *workspace = static_cast<T*>(ws);
    return Launch(s, "AttentionBackward", [=, kset = kernels_] {
      kset.AttentionBackward(q, k, v, out, lse, dout, dq, dk, dv, d, workspace);
    });
  }
  Status DoCrossEntropyForward(Stream& s, const CrossEntropyForwardArgs& a) override {
    const T* logits = P(a.logits);
    const int32_t* targets = a.targets.data;
    int32_t* flag = a.invalid_target;
    T *lse = P(a.lse), *loss = P(a.loss);
    const int64_t rows = Rows(a.logits), vocab = Last(a.logits);
    return Launch(s, "CrossEntropyForward", [=, kset = kernels_]() -> Status {
      SLUICE_RETURN_IF_ERROR(CheckTargets("CrossEntropyForward", targets, rows, vocab, flag));
      *loss = kset.CrossEntropyForward(logits, targets, lse, rows, vocab);
      return OkStatus();
    });
  }
  Status DoCrossEntropyBackward(Stream& s, const CrossEntropyBackwardArgs& a) override {
    const T *logits = P(a.logits), *lse = P(a.lse);
    const int32_t* targets = a.targets.data;
    int32_t* flag = a.invalid_target;
    T* dlogits = P(a.dlogits);
    const T dloss = static_cast<T>(a.dloss);
    const int64_t rows = Rows(a.logits), vocab = Last(a.logits);
    if (a.shard.piece()) {
      const int64_t start = a.shard.start, whole = a.shard.vocab;
      return Launch(s, "CrossEntropyBackward", [=]() -> Status {
        SLUICE_RETURN_IF_ERROR(CheckTargets("CrossEntropyBackward", targets, rows, whole, flag));
        kernels::ref::CrossEntropyShardBackward<T>(logits, targets, lse, dloss, dlogits, rows,
                                                   vocab, start);
        return OkStatus();
      });
    }
    return Launch(s, "CrossEntropyBackward", [=, kset = kernels_]() -> Status {
      SLUICE_RETURN_IF_ERROR(CheckTargets("CrossEntropyBackward", targets, rows, vocab, flag));
      kset.CrossEntropyBackward(logits, targets, lse, dloss, dlogits, rows, vocab);
      return OkStatus();
    });
  }
  Status DoCrossEntropyShardForward(Stream& s, const CrossEntropyShardForwardArgs& a) override {
    const T* logits = P(a.logits);
    const int32_t* targets = a.targets.data;
    int32_t* flag = a.invalid_target;
    T *piece_lse = P(a.piece_lse), *target_logit = P(a.target_logit);
    const int64_t rows = Rows(a.logits), cols = Last(a.logits), start = a.shard.start,
                  whole = a.shard.vocab;
    return Launch(s, "CrossEntropyShardForward", [=]() -> Status {
      SLUICE_RETURN_IF_ERROR(CheckTargets("CrossEntropyShardForward", targets, rows, whole, flag));
      kernels::ref::CrossEntropyShardForward<T>(logits, targets, piece_lse, target_logit, rows,
                                                cols, start);
      return OkStatus();
    });
  }
  Status DoCrossEntropyShardLoss(Stream& s, const CrossEntropyShardLossArgs& a) override {
    const T *piece_lse = P(a.piece_lse), *target_logit = P(a.target_logit);
    const int32_t* targets = a.targets.data;
    T *lse = P(a.lse), *loss = P(a.loss);
    const int64_t pieces = a.piece_lse.dim(0), rows = a.target_logit.numel();
    return Launch(s, "CrossEntropyShardLoss", [=] {
      *loss = kernels::ref::CrossEntropyShardLoss<T>(piece_lse, target_logit, targets, lse, pieces,
                                                     rows);
    });
  }
  Status DoLayerNormForward(Stream& s, const LayerNormForwardArgs& a) override {
    const T *x = P(a.x), *gamma = P(a.gamma), *beta = P(a.beta);
    T *y = P(a.y), *mean = P(a.mean), *rstd = P(a.rstd);
    const int64_t rows = Rows(a.x), cols = Last(a.x);
    const float eps = a.eps;
    return Launch(s, "LayerNormForward", [=, kset = kernels_] {
      kset.LayerNormForward(x, gamma, beta, y, mean, rstd, rows, cols, eps);
    });
  }
  Status DoLayerNormBackward(Stream& s, const LayerNormBackwardArgs& a) override {
    const T *x = P(a.x), *gamma = P(a.gamma), *mean = P(a.mean), *rstd = P(a.rstd), *dy = P(a.dy);
    T *dx = P(a.dx), *dgamma = P(a.dgamma), *dbeta = P(a.dbeta);
    const int64_t rows = Rows(a.x), cols = Last(a.x);
    return Launch(s, "LayerNormBackward", [=, kset = kernels_] {
      kset.LayerNormBackward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols);
    });
  }
  Status DoRmsNormForward(Stream& s, const RmsNormForwardArgs& a) override {
    const T *x = P(a.x), *gamma = P(a.gamma);
    T *y = P(a.y), *rstd = P(a.rstd);
    const int64_t rows = Rows(a.x), cols = Last(a.x);
    const float eps = a.eps;
    return Launch(s, "RmsNormForward", [=, kset = kernels_] {
      kset.RmsNormForward(x, gamma, y, rstd, rows, cols, eps);
    });
  }
  Status DoRmsNormBackward(Stream& s, const RmsNormBackwardArgs& a) override {
    const T *x = P(a.x), *gamma = P(a.gamma), *rstd = P(a.rstd), *dy = P(a.dy);
    T *dx = P(a.dx), *dgamma = P(a.dgamma);
    const int64_t rows = Rows(a.x), cols = Last(a.x);
    return Launch(s, "RmsNormBackward", [=, kset = kernels_] {
      kset.RmsNormBackward(x, gamma, rstd, dy, dx, dgamma, rows, cols);
    });
  }
  Status DoGeluForward(Stream& s, const GeluForwardArgs& a) override {
    const T* x = P(a.x);
    T* y = P(a.y);
    const int64_t n = a.x.numel();
    return Launch(s, "GeluForward", [=, kset = kernels_] { kset.GeluForward(x, y, n); });
  }
  Status DoGeluBackward(Stream& s, const GeluBackwardArgs& a) override {
    const T *x = P(a.x), *dy = P(a.dy);
    T* dx = P(a.dx);
    const int64_t n = a.x.numel();
    return Launch(s, "GeluBackward", [=, kset = kernels_] { kset.GeluBackward(x, dy, dx, n); });
  }
  Status DoSwiGluForward(Stream& s, const SwiGluForwardArgs& a) override {
    const T *gate = P(a.gate), *up = P(a.up);
    T* y = P(a.y);
    const int64_t n = a.gate.numel();
    return Launch(s, "SwiGluForward", [=, kset = kernels_] { kset.SwiGluForward(gate, up, y, n); });
  }
  Status DoSwiGluBackward(Stream& s, const SwiGluBackwardArgs& a) override {
    const T *gate = P(a.gate), *up = P(a.up), *dy = P(a.dy);
    T *dgate = P(a.dgate), *dup = P(a.dup);
    const int64_t n = a.gate.numel();
    return Launch(s, "SwiGluBackward",
                  [=, kset = kernels_] { kset.SwiGluBackward(gate, up, dy, dgate, dup, n); });
  }
  Status DoRopeForward(Stream& s, const RopeForwardArgs& a) override {
    const T* x = P(a.x);
    T* y = P(a.y);
    const int64_t b = a.x.dim(0), seq = a.x.dim(1), h = a.x.dim(2), d = a.x.dim(3);
    const float theta = a.theta;
    return Launch(s, "RopeForward",
                  [=, kset = kernels_] { kset.RopeForward(x, y, b, seq, h, d, theta); });
  }
  Status DoRopeBackward(Stream& s, const RopeBackwardArgs& a) override {
    const T* dy = P(a.dy);
    T* dx = P(a.dx);
    const int64_t b = a.dy.dim(0), seq = a.dy.dim(1), h = a.dy.dim(2), d = a.dy.dim(3);
    const float theta = a.theta;
    return Launch(s, "RopeBackward",
                  [=, kset = kernels_] { kset.RopeBackward(dy, dx, b, seq, h, d, theta); });
  }
  Status DoAdd(Stream& s, const Tensor& ta, const Tensor& tb, const Tensor& ty) override {
    const T *a = P(ta), *b = P(tb);
    T* y = P(ty);
    const int64_t n = ta.numel();
    return Launch(s, "Add", [=, kset = kernels_] { kset.Add(a, b, y, n); });
  }
  Status DoAccumulate(Stream& s, const Tensor& tx, const Tensor& ty) override {
    const int64_t n = tx.numel();
    if (tx.dtype() == K::kCompute && ty.dtype() == K::kCompute) {
      const T* x = P(tx);
      T* y = P(ty);
      return Launch(s, "Accumulate", [=, kset = kernels_] { kset.Accumulate(x, y, n); });
    }
    if (ty.dtype() != DType::kF32 || tx.dtype() == DType::kF32) {
      return UnsupportedDType("Accumulate", "x", tx);
    }
    // A 16-bit gradient into an fp32 accumulator: widen exactly, add in fp32.
    const void* x = tx.raw_data();
    const DType xt = tx.dtype();
    float* y = F(ty);
    return Launch(s, "Accumulate", [=] {
      for (int64_t i = 0; i < n; ++i) y[i] += static_cast<float>(LoadElement(x, xt, i));
    });
  }
  Status DoAdamStep(Stream& s, const AdamStepArgs& a) override {
    kernels::AdamTensors t;
    t.params = F(a.params);
    t.exp_avg = F(a.exp_avg);
    t.exp_avg_sq = F(a.exp_avg_sq);
    t.grads = a.grads.raw_data();
    t.grad_type = a.grads.dtype() == DType::kBF16  ? kernels::AdamGradType::kBF16
                  : a.grads.dtype() == DType::kF16 ? kernels::AdamGradType::kF16
                                                   : kernels::AdamGradType::kF32;
    if (!IsAbsent(a.param_copy)) {
      t.param_copy = a.param_copy.raw_data();
      t.copy_type = a.param_copy.dtype() == DType::kBF16 ? kernels::AdamCopyType::kBF16
                                                         : kernels::AdamCopyType::kF16;
    }
    t.count = static_cast<size_t>(a.params.numel());
    const std::string error = kernels::AdamTensorsError(t);
    if (!error.empty()) return InvalidArgumentError("AdamStep: {}", error);
    const kernels::AdamHyperparams hyper = a.hyper;
    const float grad_scale = a.grad_scale;
    return Launch(s, "AdamStep", [=, kset = kernels_] { kset.AdamStep(t, hyper, grad_scale); });
  }
  Status DoConvert(Stream& s, const Tensor& src, const Tensor& dst) override {
    const int64_t n = src.numel();
    const void* x = src.raw_data();
    void* y = dst.raw_data();
    const DType from = src.dtype(), to = dst.dtype();
    return Launch(s, "Convert", [=, kset = kernels_] {
      if (from == DType::kF32 && to == DType::kBF16) {
        kset.ConvertF32ToBf16(static_cast<const float*>(x), static_cast<uint16_t*>(y), n);
      } else if (from == DType::kF32 && to == DType::kF16) {
        kset.ConvertF32ToF16(static_cast<const float*>(x), static_cast<uint16_t*>(y), n);
      } else if (from == DType::kBF16) {
        kset.ConvertBf16ToF32(static_cast<const uint16_t*>(x), static_cast<float*>(y), n);
      } else {
        kset.ConvertF16ToF32(static_cast<const uint16_t*>(x), static_cast<float*>(y), n);
      }
    });
  }
  Status DoSquaredSum(Stream& s, const Tensor& tx, const Tensor& out) override {
    const void* x = tx.raw_data();
    const DType dtype = tx.dtype();
    const int64_t n = tx.numel();
    double* result = static_cast<double*>(out.raw_data());
    return Launch(s, "SquaredSum", [=] {
      // Sequential in double, as engine/zero/shard_grad_norm.cpp sums: each square of an fp32
      // value is exact in double.
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = LoadElement(x, dtype, i);
        sum += v * v;
      }
      *result = sum;
    });
  }
  Status DoBlockSquaredSums(Stream& s, const Tensor& tx, const BlockSumList& list,
                            const Tensor& out) override {
    const float* x = static_cast<const float*>(tx.raw_data());
    const int64_t n = tx.numel();
    double* sums = static_cast<double*>(out.raw_data());
    return Launch(s, "BlockSquaredSums", [=]() -> Status {
      for (int64_t j = 0; j < list.blocks; ++j) {
        for (int64_t p = list.first[j]; p < list.first[j + 1]; ++p) {
          const SumPiece piece = list.pieces[p];
          if (piece.offset < 0 || piece.count < 0 || piece.offset + piece.count > n) {
            return OutOfRangeError(
                "BlockSquaredSums: piece {} of block {} (offset {}, count {}) is outside x ({} "
                "elements)",
                p, j, piece.offset, piece.count, n);
          }
        }
      }
      BlockSquaredSumsOnHost(x, list, sums, /*threads=*/1);
      return OkStatus();
    });
  }
  Status DoFlagInfOrNan(Stream& s, const Tensor& tx, int32_t* flag) override {
    const void* x = tx.raw_data();
    const DType dtype = tx.dtype();
    const int64_t n = tx.numel();
    return Launch(s, "FlagInfOrNan", [=] {
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(LoadElement(x, dtype, i))) {
          *flag = 1;
          break;
        }
      }
    });
  }
  Status DoFill(Stream& s, const Tensor& ty, double value) override {
    void* y = ty.raw_data();
    const DType dtype = ty.dtype();
    const int64_t n = ty.numel();
    return Launch(s, "Fill", [=] {
      for (int64_t i = 0; i < n; ++i) StoreElement(y, dtype, i, value);
    });
  }
  Status DoScale(Stream& s, const Tensor& ty, double factor) override {
    const int64_t n = ty.numel();
    if (ty.dtype() == DType::kF32) {
      float* y = F(ty);
      const float f = static_cast<float>(factor);
      return Launch(s, "Scale", [=, kset = kernels_] { kset.ScaleF32(y, f, n); });
    }
    double* y = static_cast<double*>(ty.raw_data());
    return Launch(s, "Scale", [=] { kernels::ref::Scale<double>(y, factor, n); });
  }
  Status DoAccumulateSegments(Stream& s, const Tensor& src, const Tensor& dst,
                              const CopySegmentList& segments) override {
    const float* x = static_cast<const float*>(src.raw_data());
    float* y = static_cast<float*>(dst.raw_data());
    const int64_t src_n = src.numel(), dst_n = dst.numel();
    const CopySegment* list = segments.data;
    const int count = segments.count;
    return Launch(s, "AccumulateSegments", [=]() -> Status {
      for (int k = 0; k < count; ++k) {
        const CopySegment g = list[k];
        if (g.count < 0 || g.src_offset < 0 || g.dst_offset < 0 || g.src_offset + g.count > src_n ||
            g.dst_offset + g.count > dst_n) {
          return OutOfRangeError(
              "AccumulateSegments: segment {} (src_offset {}, dst_offset {}, count {}) is outside "
              "src ({} elements) or dst ({} elements)",
              k, g.src_offset, g.dst_offset, g.count, src_n, dst_n);
        }
        for (int64_t i = 0; i < g.count; ++i) y[g.dst_offset + i] += x[g.src_offset + i];
      }
      return OkStatus();
    });
  }
  Status DoCopySegments(Stream& s, const Tensor& src, const Tensor& dst,
                        const CopySegmentList& segments) override {
    const char* x = static_cast<const char*>(src.raw_data());
    char* y = static_cast<char*>(dst.raw_data());
    const DType from = src.dtype(), to = dst.dtype();
    const int64_t src_n = src.numel(), dst_n = dst.numel();
    const CopySegment* list = segments.data;
    const int count = segments.count;
    return Launch(s, "CopySegments", [=]() -> Status {
      const size_t in_size = DTypeSize(from), out_size = DTypeSize(to);
      for (int k = 0; k < count; ++k) {
        const CopySegment g = list[k];
        if (g.count < 0 || g.zero_fill < 0 || g.src_offset < 0 || g.dst_offset < 0 ||
            g.src_offset + g.count > src_n || g.dst_offset + g.count + g.zero_fill > dst_n) {
          return OutOfRangeError(
              "CopySegments: segment {} (src_offset {}, dst_offset {}, count {}, zero_fill {}) "
              "is outside src ({} elements) or dst ({} elements)",
              k, g.src_offset, g.dst_offset, g.count, g.zero_fill, src_n, dst_n);
        }
        char* out = y + g.dst_offset * out_size;
        if (from == to) {
          std::memcpy(out, x + g.src_offset * in_size, g.count * in_size);
        } else if (from == DType::kBF16 && to == DType::kF32) {
          // ZeRO's unpacking of bf16 parameters: a widening the compiler vectorizes.
          const auto* in = reinterpret_cast<const uint16_t*>(x + g.src_offset * in_size);
          auto* widened = reinterpret_cast<float*>(out);
          for (int64_t i = 0; i < g.count; ++i) widened[i] = kernels::Bf16ToF32(in[i]);
        } else {
          const char* in = x + g.src_offset * in_size;
          for (int64_t i = 0; i < g.count; ++i) StoreElement(out, to, i, LoadElement(in, from, i));
        }
        std::memset(out + g.count * out_size, 0, g.zero_fill * out_size);
      }
      return OkStatus();
    });
  }

 private:
  static size_t WorkspaceBytes(const kernels::AttentionDims& d) {
    return static_cast<size_t>(kernels::AttentionWorkspaceElements(d)) * sizeof(T);
  }
  // The kernels abort on an id outside the vocabulary; ids come from data, so here that is the
  // stream's sticky error instead (and the optional device flag, as on CUDA).
  static Status CheckTokens(std::string_view op, const int32_t* tokens, int64_t n, int64_t vocab,
                            int32_t* flag) {
    const int64_t bad = kernels::FirstInvalidToken(tokens, n, vocab);
    if (bad < 0) return OkStatus();
    if (flag != nullptr) *flag = 1;
    return InvalidArgumentError("{}: token {} at index {} is outside the vocabulary [0, {})", op,
                                tokens[bad], bad, vocab);
  }
  static Status CheckTargets(std::string_view op, const int32_t* targets, int64_t rows,
                             int64_t vocab, int32_t* flag) {
    const int64_t bad = kernels::FirstInvalidTarget(targets, rows, vocab);
    if (bad < 0) return OkStatus();
    if (flag != nullptr) *flag = 1;
    return InvalidArgumentError(
        "{}: target {} at row {} is outside [0, {}) and is not the ignore index {}", op,
        targets[bad], bad, vocab, kernels::kIgnoreIndex);
  }

  K kernels_;
  ScratchPool scratch_;
};

}  // namespace sluice::ops::internal
