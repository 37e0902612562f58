// The cuda column of the ops table: kernels/cuda launched on the stream's own cudaStream_t
// (Stream::native()), compute in f32 or bf16, saved statistics and parameter gradients in f32.
#include "runtime/ops/cuda_ops_backend.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <unordered_map>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/adam.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/flat_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/ref/half.h"
#include "runtime/ops/scratch_pool.h"

namespace sluice::ops::internal {
namespace {

namespace kc = kernels::cuda;
using Bf16 = __nv_bfloat16;

static_assert(sizeof(CopySegment) == sizeof(kc::FlatSegment) &&
                  offsetof(CopySegment, src_offset) == offsetof(kc::FlatSegment, src_offset) &&
                  offsetof(CopySegment, dst_offset) == offsetof(kc::FlatSegment, dst_offset) &&
                  offsetof(CopySegment, count) == offsetof(kc::FlatSegment, count) &&
                  offsetof(CopySegment, zero_fill) == offsetof(kc::FlatSegment, zero_fill),
              "CopySegment must be laid out as kernels::cuda::FlatSegment");
static_assert(sizeof(SumPiece) == sizeof(kc::SumPiece) &&
                  offsetof(SumPiece, offset) == offsetof(kc::SumPiece, offset) &&
                  offsetof(SumPiece, count) == offsetof(kc::SumPiece, count),
              "SumPiece must be laid out as kernels::cuda::SumPiece");

// A rejected argument stays InvalidArgument; anything CUDA or cuBLAS said is Internal. The op
// is named once: most launchers' messages start with it already.
Status FromLaunch(std::string_view op, const kc::LaunchStatus& s) {
  if (s.ok()) return OkStatus();
  const std::string& message = s.message();
  const std::string text = message.starts_with(op) ? message : fmt::format("{}: {}", op, message);
  if (s.code() == kc::LaunchStatus::Code::kInvalidArgument) return InvalidArgumentError("{}", text);
  return InternalError("{}", text);
}

cudaStream_t Native(Stream& stream) { return static_cast<cudaStream_t>(stream.native()); }

template <typename T>
T* P(const Tensor& t) {
  return IsAbsent(t) ? nullptr : static_cast<T*>(t.raw_data());
}
float* F(const Tensor& t) { return P<float>(t); }
int64_t Last(const Tensor& t) { return t.dim(t.rank() - 1); }
int64_t Rows(const Tensor& t) { return Last(t) == 0 ? 0 : t.numel() / Last(t); }

kernels::AttentionDims Dims(const Tensor& q, const Tensor& k) {
  return {.batch = q.dim(0),
          .seq = q.dim(1),
          .q_heads = q.dim(2),
          .kv_heads = k.dim(2),
          .head_dim = q.dim(3)};
}

kc::Fp32Math Fp32MathOf(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kTf32:
      return kc::Fp32Math::kTf32;
    case MatmulPrecision::kBf16:
      return kc::Fp32Math::kBf16;
    case MatmulPrecision::kFp32:
      break;
  }
  return kc::Fp32Math::kStrict;
}

class CudaOpsBackend : public OpsBackend {
 public:
  explicit CudaOpsBackend(Device& device) : OpsBackend(device), scratch_(device) {}

  std::string_view name() const override { return "cuda"; }
  bool Supports(DType compute) const override {
    return compute == DType::kF32 || compute == DType::kBF16;
  }
  void ReleaseScratch(Stream& stream) override {
    scratch_.Release(stream);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = gemm_.find(stream.id());
    if (it == gemm_.end()) return;
    // The context's workspace may still be in use by enqueued products: free it on the stream.
    it->second.context.reset();
    it->second.workspace.FreeAsync(stream);
    gemm_.erase(it);
  }

 protected:
  // Runs fn with a value of the compute type (float or __nv_bfloat16) of `dtype`.
  template <typename Fn>
  static Status ByCompute(DType dtype, Fn&& fn) {
    if (dtype == DType::kBF16) return fn(Bf16{});
    return fn(float{});
  }

  Status DoLinearForward(Stream& s, const LinearForwardArgs& a) override {
    SLUICE_ASSIGN_OR_RETURN(kc::GemmContext * ctx, Gemm(s));
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("LinearForward",
                        kc::LinearForward<T>(*ctx, P<T>(a.x), P<T>(a.w), P<T>(a.b), P<T>(a.y),
                                             Rows(a.x), Last(a.x), a.w.dim(0), Native(s)));
    });
  }
  Status DoLinearBackward(Stream& s, const LinearBackwardArgs& a) override {
    SLUICE_ASSIGN_OR_RETURN(kc::GemmContext * ctx, Gemm(s));
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "LinearBackward",
          kc::LinearBackward<T>(*ctx, P<T>(a.x), P<T>(a.w), P<T>(a.dy), P<T>(a.dx), F(a.dw),
                                F(a.db), Rows(a.x), Last(a.x), a.w.dim(0), Native(s)));
    });
  }
  Status DoEmbeddingForward(Stream& s, const EmbeddingForwardArgs& a) override {
    if (a.shard.piece()) return NoVocabShards("EmbeddingForward");
    return ByCompute(a.table.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "EmbeddingForward",
          kc::EmbeddingForward<T>(a.tokens.data, P<T>(a.table), P<T>(a.out), a.tokens.count,
                                  a.table.dim(0), a.table.dim(1), a.invalid_token, Native(s)));
    });
  }
  Status DoEmbeddingBackward(Stream& s, const EmbeddingBackwardArgs& a) override {
    if (a.shard.piece()) return NoVocabShards("EmbeddingBackward");
    const int64_t vocab = a.dtable.dim(0);
    const size_t bytes = kc::EmbeddingBackwardWorkspaceBytes(a.tokens.count, vocab);
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, bytes));
    return ByCompute(a.dout.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "EmbeddingBackward",
          kc::EmbeddingBackward<T>(a.tokens.data, P<T>(a.dout), F(a.dtable), a.tokens.count, vocab,
                                   a.dtable.dim(1), a.invalid_token, ws, bytes, Native(s)));
    });
  }
  Status DoPositionEmbeddingForward(Stream& s, const PositionEmbeddingForwardArgs& a) override {
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "PositionEmbeddingForward",
          kc::PositionEmbeddingForward<T>(P<T>(a.wpe), P<T>(a.x), a.x.dim(0), a.x.dim(1),
                                          a.wpe.dim(0), a.x.dim(2), Native(s)));
    });
  }
  Status DoPositionEmbeddingBackward(Stream& s, const PositionEmbeddingBackwardArgs& a) override {
    return ByCompute(a.dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "PositionEmbeddingBackward",
          kc::PositionEmbeddingBackward<T>(P<T>(a.dx), F(a.dwpe), a.dx.dim(0), a.dx.dim(1),
                                           a.dwpe.dim(0), a.dx.dim(2), Native(s)));
    });
  }
  Status DoAttentionForward(Stream& s, const AttentionForwardArgs& a) override {
    const kernels::AttentionDims d = Dims(a.q, a.k);
    return ByCompute(a.q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("AttentionForward",
                        kc::AttentionForward<T>(P<T>(a.q), P<T>(a.k), P<T>(a.v), P<T>(a.out),
                                                F(a.lse), d, Native(s)));
    });
  }
  Status DoAttentionBackward(Stream& s, const AttentionBackwardArgs& a) override {
    const kernels::AttentionDims d = Dims(a.q, a.k);
    const size_t bytes = kc::AttentionBackwardWorkspaceBytes(d);
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, bytes));
    return ByCompute(a.q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("AttentionBackward",
                        kc::AttentionBackward<T>(P<T>(a.q), P<T>(a.k), P<T>(a.v), P<T>(a.out),
                                                 F(a.lse), P<T>(a.dout), P<T>(a.dq), P<T>(a.dk),
                                                 P<T>(a.dv), d, ws, bytes, Native(s)));
    });
  }
  Status DoCrossEntropyForward(Stream& s, const CrossEntropyForwardArgs& a) override {
    return ByCompute(a.logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "CrossEntropyForward",
          kc::CrossEntropyForward<T>(P<T>(a.logits), a.targets.data, F(a.lse), Rows(a.logits),
                                     Last(a.logits), F(a.loss), a.invalid_target, Native(s)));
    });
  }
  Status DoCrossEntropyBackward(Stream& s, const CrossEntropyBackwardArgs& a) override {
    if (a.shard.piece()) return NoVocabShards("CrossEntropyBackward");
    const size_t bytes = kc::CrossEntropyBackwardWorkspaceBytes(Rows(a.logits));
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, bytes));
    return ByCompute(a.logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "CrossEntropyBackward",
          kc::CrossEntropyBackward<T>(P<T>(a.logits), a.targets.data, F(a.lse),
                                      static_cast<float>(a.dloss), P<T>(a.dlogits), Rows(a.logits),
                                      Last(a.logits), a.invalid_target, ws, bytes, Native(s)));
    });
  }
  Status DoCrossEntropyShardForward(Stream&, const CrossEntropyShardForwardArgs&) override {
    return NoVocabShards("CrossEntropyShardForward");
  }
  Status DoCrossEntropyShardLoss(Stream&, const CrossEntropyShardLossArgs&) override {
    return NoVocabShards("CrossEntropyShardLoss");
  }
  // The vocabulary-parallel kernels (kernels/ref/ops_vocab_shard.h) exist on the host columns
  // only so far.
  bool SupportsVocabShards() const override { return false; }

  Status SetMatmulPrecision(MatmulPrecision precision) override {
    std::lock_guard<std::mutex> lock(mu_);
    fp32_math_ = Fp32MathOf(precision);
    for (auto& [id, state] : gemm_) state.context->set_fp32_math(fp32_math_);
    return OkStatus();
  }
  static Status NoVocabShards(std::string_view op) {
    return UnimplementedError(
        "{}: the cuda ops backend has no kernels for a piece of the vocabulary (tensor "
        "parallelism's vocabulary-parallel embedding and cross-entropy) yet; run tensor "
        "parallelism on the cpu backend",
        op);
  }
  Status DoLayerNormForward(Stream& s, const LayerNormForwardArgs& a) override {
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "LayerNormForward",
          kc::LayerNormForward<T>(P<T>(a.x), P<T>(a.gamma), P<T>(a.beta), P<T>(a.y), F(a.mean),
                                  F(a.rstd), Rows(a.x), Last(a.x), a.eps, Native(s)));
    });
  }
  Status DoLayerNormBackward(Stream& s, const LayerNormBackwardArgs& a) override {
    const size_t bytes = kc::NormBackwardWorkspaceBytes(Rows(a.x), Last(a.x));
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, bytes));
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("LayerNormBackward",
                        kc::LayerNormBackward<T>(P<T>(a.x), P<T>(a.gamma), F(a.mean), F(a.rstd),
                                                 P<T>(a.dy), P<T>(a.dx), F(a.dgamma), F(a.dbeta),
                                                 Rows(a.x), Last(a.x), ws, bytes, Native(s)));
    });
  }
  Status DoRmsNormForward(Stream& s, const RmsNormForwardArgs& a) override {
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("RmsNormForward",
                        kc::RmsNormForward<T>(P<T>(a.x), P<T>(a.gamma), P<T>(a.y), F(a.rstd),
                                              Rows(a.x), Last(a.x), a.eps, Native(s)));
    });
  }
  Status DoRmsNormBackward(Stream& s, const RmsNormBackwardArgs& a) override {
    const size_t bytes = kc::NormBackwardWorkspaceBytes(Rows(a.x), Last(a.x));
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, bytes));
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch(
          "RmsNormBackward",
          kc::RmsNormBackward<T>(P<T>(a.x), P<T>(a.gamma), F(a.rstd), P<T>(a.dy), P<T>(a.dx),
                                 F(a.dgamma), Rows(a.x), Last(a.x), ws, bytes, Native(s)));
    });
  }
  Status DoGeluForward(Stream& s, const GeluForwardArgs& a) override {
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("GeluForward",
                        kc::GeluForward<T>(P<T>(a.x), P<T>(a.y), a.x.numel(), Native(s)));
    });
  }
  Status DoGeluBackward(Stream& s, const GeluBackwardArgs& a) override {
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("GeluBackward", kc::GeluBackward<T>(P<T>(a.x), P<T>(a.dy), P<T>(a.dx),
                                                            a.x.numel(), Native(s)));
    });
  }
  Status DoSwiGluForward(Stream& s, const SwiGluForwardArgs& a) override {
    return ByCompute(a.gate.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("SwiGluForward", kc::SwiGluForward<T>(P<T>(a.gate), P<T>(a.up), P<T>(a.y),
                                                              a.gate.numel(), Native(s)));
    });
  }
  Status DoSwiGluBackward(Stream& s, const SwiGluBackwardArgs& a) override {
    return ByCompute(a.gate.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("SwiGluBackward",
                        kc::SwiGluBackward<T>(P<T>(a.gate), P<T>(a.up), P<T>(a.dy), P<T>(a.dgate),
                                              P<T>(a.dup), a.gate.numel(), Native(s)));
    });
  }
  Status DoRopeForward(Stream& s, const RopeForwardArgs& a) override {
    return ByCompute(a.x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("RopeForward",
                        kc::RopeForward<T>(P<T>(a.x), P<T>(a.y), a.x.dim(0), a.x.dim(1), a.x.dim(2),
                                           a.x.dim(3), a.theta, Native(s)));
    });
  }
  Status DoRopeBackward(Stream& s, const RopeBackwardArgs& a) override {
    return ByCompute(a.dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("RopeBackward",
                        kc::RopeBackward<T>(P<T>(a.dy), P<T>(a.dx), a.dy.dim(0), a.dy.dim(1),
                                            a.dy.dim(2), a.dy.dim(3), a.theta, Native(s)));
    });
  }
  Status DoAdd(Stream& s, const Tensor& ta, const Tensor& tb, const Tensor& ty) override {
    return ByCompute(ta.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("Add", kc::Add<T>(P<T>(ta), P<T>(tb), P<T>(ty), ta.numel(), Native(s)));
    });
  }
  Status DoAccumulate(Stream& s, const Tensor& tx, const Tensor& ty) override {
    const int64_t n = tx.numel();
    if (tx.dtype() == ty.dtype()) {
      if (!Supports(tx.dtype())) return UnsupportedDType("Accumulate", "x", tx);
      return ByCompute(tx.dtype(), [&](auto tag) {
        using T = decltype(tag);
        return FromLaunch("Accumulate", kc::Accumulate<T>(P<T>(tx), P<T>(ty), n, Native(s)));
      });
    }
    if (tx.dtype() != DType::kBF16) return UnsupportedDType("Accumulate", "x", tx);
    return FromLaunch("Accumulate", kc::AccumulateToF32<Bf16>(P<Bf16>(tx), F(ty), n, Native(s)));
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
    return FromLaunch("AdamStep", kc::AdamStep(t, a.hyper, a.grad_scale, Native(s)));
  }
  Status DoConvert(Stream& s, const Tensor& src, const Tensor& dst) override {
    const int64_t n = src.numel();
    const DType from = src.dtype(), to = dst.dtype();
    kc::LaunchStatus status;
    if (from == DType::kF32 && to == DType::kBF16) {
      status = kc::ConvertF32ToBf16(F(src), P<Bf16>(dst), n, Native(s));
    } else if (from == DType::kF32 && to == DType::kF16) {
      status = kc::ConvertF32ToF16(F(src), P<__half>(dst), n, Native(s));
    } else if (from == DType::kBF16) {
      status = kc::ConvertBf16ToF32(P<Bf16>(src), F(dst), n, Native(s));
    } else {
      status = kc::ConvertF16ToF32(P<__half>(src), F(dst), n, Native(s));
    }
    return FromLaunch("Convert", status);
  }
  Status DoSquaredSum(Stream& s, const Tensor& x, const Tensor& out) override {
    if (!Supports(x.dtype())) return UnsupportedDType("SquaredSum", "x", x);
    const size_t bytes = kc::SquaredSumWorkspaceBytes(x.numel());
    SLUICE_ASSIGN_OR_RETURN(void* ws, scratch_.Get(s, bytes));
    return ByCompute(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("SquaredSum", kc::SquaredSum<T>(P<T>(x), x.numel(), P<double>(out), ws,
                                                        bytes, Native(s)));
    });
  }
  Status DoFlagInfOrNan(Stream& s, const Tensor& x, int32_t* flag) override {
    if (!Supports(x.dtype())) return UnsupportedDType("FlagInfOrNan", "x", x);
    return ByCompute(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return FromLaunch("FlagInfOrNan", kc::FlagInfOrNan<T>(P<T>(x), x.numel(), flag, Native(s)));
    });
  }
  Status DoFill(Stream& s, const Tensor& y, double value) override {
    if (y.dtype() == DType::kF32) {
      return FromLaunch("Fill",
                        kc::Fill<float>(F(y), static_cast<float>(value), y.numel(), Native(s)));
    }
    if (y.dtype() == DType::kBF16) {
      __nv_bfloat16_raw raw;
      raw.x = kernels::F32ToBf16(static_cast<float>(value));
      return FromLaunch("Fill", kc::Fill<Bf16>(P<Bf16>(y), Bf16(raw), y.numel(), Native(s)));
    }
    return UnsupportedDType("Fill", "y", y);
  }
  Status DoScale(Stream& s, const Tensor& y, double factor) override {
    // f32 only: the f64 of the host columns has no CUDA kernel.
    if (y.dtype() != DType::kF32) return UnsupportedDType("Scale", "y", y);
    return FromLaunch("Scale", kc::Scale(F(y), static_cast<float>(factor), y.numel(), Native(s)));
  }
  Status DoBlockSquaredSums(Stream& s, const Tensor& x, const BlockSumList& list,
                            const Tensor& out) override {
    return FromLaunch("BlockSquaredSums",
                      kc::BlockSquaredSums(F(x), reinterpret_cast<const kc::SumPiece*>(list.pieces),
                                           list.first, list.blocks, P<double>(out), Native(s)));
  }
  Status DoAccumulateSegments(Stream& s, const Tensor& src, const Tensor& dst,
                              const CopySegmentList& list) override {
    return FromLaunch(
        "AccumulateSegments",
        kc::AccumulateSegments(F(src), F(dst), reinterpret_cast<const kc::FlatSegment*>(list.data),
                               list.count, list.max_segment_elements, Native(s)));
  }
  Status DoCopySegments(Stream& s, const Tensor& src, const Tensor& dst,
                        const CopySegmentList& list) override {
    const auto* segs = reinterpret_cast<const kc::FlatSegment*>(list.data);
    const int n = list.count;
    const int64_t max = list.max_segment_elements;
    const DType from = src.dtype(), to = dst.dtype();
    const cudaStream_t stream = Native(s);
    kc::LaunchStatus status;
    if (from == DType::kF32 && to == DType::kF32) {
      status = kc::CopySegments<float, float>(F(src), F(dst), segs, n, max, stream);
    } else if (from == DType::kBF16 && to == DType::kBF16) {
      status = kc::CopySegments<Bf16, Bf16>(P<Bf16>(src), P<Bf16>(dst), segs, n, max, stream);
    } else if (from == DType::kF16 && to == DType::kF16) {
      status =
          kc::CopySegments<__half, __half>(P<__half>(src), P<__half>(dst), segs, n, max, stream);
    } else if (from == DType::kBF16 && to == DType::kF32) {
      status = kc::CopySegments<Bf16, float>(P<Bf16>(src), F(dst), segs, n, max, stream);
    } else if (from == DType::kF16 && to == DType::kF32) {
      status = kc::CopySegments<__half, float>(P<__half>(src), F(dst), segs, n, max, stream);
    } else if (from == DType::kF32 && to == DType::kBF16) {
      status = kc::CopySegments<float, Bf16>(F(src), P<Bf16>(dst), segs, n, max, stream);
    } else if (from == DType::kF32 && to == DType::kF16) {
      status = kc::CopySegments<float, __half>(F(src), P<__half>(dst), segs, n, max, stream);
    } else {
      return UnsupportedDType("CopySegments", "src", src);
    }
    return FromLaunch("CopySegments", status);
  }

 private:
  struct GemmState {
    DeviceBuffer workspace;
    std::unique_ptr<kc::GemmContext> context;
  };

  // The stream's cuBLASLt context, made on first use with a workspace from the Device (so the
  // ledger sees it), never shared with another stream.
  Result<kc::GemmContext*> Gemm(Stream& stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = gemm_.find(stream.id());
    if (it != gemm_.end()) return it->second.context.get();
    GemmState state;
    SLUICE_ASSIGN_OR_RETURN(
        state.workspace,
        device().Allocate(kc::GemmContext::kDefaultWorkspaceBytes, MemoryCategory::kBuffers));
    const cudaError_t set = cudaSetDevice(device().index());
    if (set != cudaSuccess) {
      return InternalError("LinearForward: cudaSetDevice({}) failed: {}", device().index(),
                           cudaGetErrorString(set));
    }
    SLUICE_RETURN_IF_ERROR(FromLaunch(
        "cuBLASLt context for " + stream.name(),
        kc::GemmContext::Create(state.workspace.data(), state.workspace.size(), &state.context)));
    kc::GemmContext* context = state.context.get();
    context->set_fp32_math(fp32_math_);
    gemm_.emplace(stream.id(), std::move(state));
    return context;
  }

  ScratchPool scratch_;
  std::mutex mu_;
  std::unordered_map<uint64_t, GemmState> gemm_;  // by stream id
  kc::Fp32Math fp32_math_ = kc::Fp32Math::kStrict;
};

}  // namespace

Result<std::unique_ptr<OpsBackend>> CreateCudaOpsBackend(Device& device) {
  if (device.kind() != DeviceKind::kCuda) {
    return InvalidArgumentError("the cuda ops backend needs a cuda device, not {}", device.name());
  }
  return std::unique_ptr<OpsBackend>(std::make_unique<CudaOpsBackend>(device));
}

}  // namespace sluice::ops::internal
