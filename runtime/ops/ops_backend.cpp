#include "runtime/ops/ops_backend.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kernels/ref/ops_attention.h"

namespace sluice::ops {
namespace {

// "f32[8, 32]": what error messages show of a tensor (its place is checked apart).
std::string Describe(const Tensor& t) {
  if (IsAbsent(t)) return "empty";
  return fmt::format("{}{}", DTypeName(t.dtype()), t.shape().ToString());
}

Shape WithLastDim(const Shape& shape, int64_t last) {
  std::vector<int64_t> dims(shape.dims().begin(), shape.dims().end());
  if (dims.empty()) dims.push_back(last);
  dims.back() = last;
  return Shape(std::span<const int64_t>(dims));
}

// Checks the tensors of one op call against what the op expects and builds the message of the
// first mismatch: "LinearForward: w is bf16[64, 32], expected f32[64, 32] (x is f32[8, 32])".
// `first` is a check already made (the op's compute-dtype gate): when it failed, it is the result.
class ArgCheck {
 public:
  ArgCheck(std::string_view op, const Device& device, std::string_view anchor_name,
           const Tensor& anchor, Status first = OkStatus())
      : op_(op),
        device_(device),
        anchor_(fmt::format("{} is {}", anchor_name, Describe(anchor))),
        status_(std::move(first)) {}

  // A tensor that must be present with exactly this dtype and shape.
  ArgCheck& Exact(std::string_view name, const Tensor& t, DType dtype, const Shape& shape) {
    if (!status_.ok()) return *this;
    if (IsAbsent(t) || t.dtype() != dtype || !(t.shape() == shape)) {
      Fail(name, t, fmt::format("{}{}", DTypeName(dtype), shape.ToString()));
      return *this;
    }
    return Place(name, t);
  }
  // As Exact, with the dtype and shape of `like`.
  ArgCheck& Like(std::string_view name, const Tensor& t, const Tensor& like) {
    return Exact(name, t, like.dtype(), like.shape());
  }
  // As Exact, but an empty tensor (not wanted) passes.
  ArgCheck& Optional(std::string_view name, const Tensor& t, DType dtype, const Shape& shape) {
    if (IsAbsent(t)) return *this;
    return Exact(name, t, dtype, shape);
  }
  // A tensor that must hold `numel` elements of `dtype`, any shape; `expected` describes it.
  ArgCheck& Numel(std::string_view name, const Tensor& t, DType dtype, int64_t numel,
                  std::string_view expected) {
    if (!status_.ok()) return *this;
    if (IsAbsent(t) || t.dtype() != dtype || t.numel() != numel) {
      Fail(name, t, fmt::format("{}{}", DTypeName(dtype), expected));
      return *this;
    }
    return Place(name, t);
  }
  // A tensor of `n` elements of `dtype`, any shape (expected "[n]").
  ArgCheck& Elements(std::string_view name, const Tensor& t, DType dtype, int64_t n) {
    return Numel(name, t, dtype, n, fmt::format("[{}]", n));
  }
  // A condition the message explains on its own.
  ArgCheck& Require(bool ok, std::string_view name, const Tensor& t, std::string_view expected) {
    if (status_.ok() && !ok) Fail(name, t, expected);
    return *this;
  }
  ArgCheck& Place(std::string_view name, const Tensor& t) {
    if (!status_.ok() || IsAbsent(t)) return *this;
    if (t.tier() != MemoryTier::kDevice || t.device_index() != device_.index()) {
      status_ = InvalidArgumentError("{}: {} is {}, expected memory of device {}", op_, name,
                                     t.ToString(), device_.name());
    } else if (t.raw_data() == nullptr && t.numel() > 0) {
      status_ = InvalidArgumentError("{}: {} is {} with no data", op_, name, Describe(t));
    }
    return *this;
  }
  ArgCheck& Int32(std::string_view name, const Int32View& v, int64_t count) {
    if (!status_.ok()) return *this;
    if (v.count != count || (v.data == nullptr && count > 0)) {
      status_ =
          InvalidArgumentError("{}: {} is i32[{}]{}, expected i32[{}] ({})", op_, name, v.count,
                               v.data == nullptr ? " with no data" : "", count, anchor_);
    }
    return *this;
  }

  Status status() const { return status_; }

 private:
  void Fail(std::string_view name, const Tensor& t, std::string_view expected) {
    status_ = InvalidArgumentError("{}: {} is {}, expected {} ({})", op_, name, Describe(t),
                                   expected, anchor_);
  }

  std::string_view op_;
  const Device& device_;
  std::string anchor_;
  Status status_;
};

// Rows of a [..., last] tensor: the product of the leading dimensions.
int64_t RowsOf(const Tensor& t) {
  const int64_t last = t.rank() == 0 ? 1 : t.dim(t.rank() - 1);
  return last == 0 ? 0 : t.numel() / last;
}
int64_t LastDim(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(t.rank() - 1); }

// A vocabulary piece of `width` ids (the table's rows, the logits' columns) must lie inside its
// vocabulary.
Status CheckShard(std::string_view op, std::string_view name, int64_t width,
                  const VocabShard& shard) {
  if (!shard.piece()) return OkStatus();
  if (shard.start < 0 || width < 1 || shard.start + width > shard.vocab) {
    return InvalidArgumentError(
        "{}: {} holds {} ids of the vocabulary from {}, which do not lie in [0, {})", op, name,
        width, shard.start, shard.vocab);
  }
  return OkStatus();
}

}  // namespace

Status OpsBackend::UnsupportedDType(std::string_view op, std::string_view what,
                                    const Tensor& t) const {
  return UnimplementedError("{}: {} {} is not supported by the {} ops backend", op, what,
                            Describe(t), name());
}

Status OpsBackend::CheckCompute(std::string_view op, std::string_view name, const Tensor& t) const {
  if (IsAbsent(t)) return InvalidArgumentError("{}: {} is empty, expected a tensor", op, name);
  if (!Supports(t.dtype())) {
    return UnimplementedError(
        "{}: compute dtype {} ({} is {}) is not supported by the {} ops backend", op,
        DTypeName(t.dtype()), name, Describe(t), this->name());
  }
  if (t.rank() == 0) {
    return InvalidArgumentError("{}: {} is {}, expected at least one dimension", op, name,
                                Describe(t));
  }
  return OkStatus();
}

std::string_view MatmulPrecisionName(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kFp32:
      return "fp32";
    case MatmulPrecision::kTf32:
      return "tf32";
    case MatmulPrecision::kBf16:
      return "bf16";
  }
  return "?";
}

Result<MatmulPrecision> ParseMatmulPrecision(std::string_view name) {
  for (MatmulPrecision p :
       {MatmulPrecision::kFp32, MatmulPrecision::kTf32, MatmulPrecision::kBf16}) {
    if (name == MatmulPrecisionName(p)) return p;
  }
  return InvalidArgumentError("matmul precision '{}': expected fp32, tf32 or bf16", name);
}

Status OpsBackend::SetMatmulPrecision(MatmulPrecision precision) {
  if (precision == MatmulPrecision::kFp32) return OkStatus();
  return UnimplementedError(
      "matmul precision {} is not supported by the {} ops backend, which multiplies fp32 "
      "matrices in fp32 only: use fp32 (TF32 and bf16 tensor-core products need a cuda device)",
      MatmulPrecisionName(precision), name());
}

Status OpsBackend::LinearForward(Stream& stream, const LinearForwardArgs& a) {
  constexpr std::string_view kOp = "LinearForward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  const DType t = a.x.dtype();
  const int64_t in = LastDim(a.x);
  const int64_t out = a.w.rank() == 2 ? a.w.dim(0) : 0;
  check.Place("x", a.x)
      .Require(a.w.rank() == 2, "w", a.w, fmt::format("{}[out, {}]", DTypeName(t), in))
      .Exact("w", a.w, t, Shape{out, in})
      .Optional("b", a.b, t, Shape{out})
      .Exact("y", a.y, t, WithLastDim(a.x.shape(), out));
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoLinearForward(stream, a);
}

Status OpsBackend::LinearBackward(Stream& stream, const LinearBackwardArgs& a) {
  constexpr std::string_view kOp = "LinearBackward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  const DType t = a.x.dtype();
  const DType acc = AccumDType(t);
  const int64_t in = LastDim(a.x);
  const int64_t out = a.w.rank() == 2 ? a.w.dim(0) : 0;
  check.Place("x", a.x)
      .Require(a.w.rank() == 2, "w", a.w, fmt::format("{}[out, {}]", DTypeName(t), in))
      .Exact("w", a.w, t, Shape{out, in})
      .Exact("dy", a.dy, t, WithLastDim(a.x.shape(), out))
      .Optional("dx", a.dx, t, a.x.shape())
      .Optional("dw", a.dw, acc, Shape{out, in})
      .Optional("db", a.db, acc, Shape{out});
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoLinearBackward(stream, a);
}

Status OpsBackend::EmbeddingForward(Stream& stream, const EmbeddingForwardArgs& a) {
  constexpr std::string_view kOp = "EmbeddingForward";
  ArgCheck check(kOp, device(), "table", a.table, CheckCompute(kOp, "table", a.table));
  const DType t = a.table.dtype();
  const int64_t dim = LastDim(a.table);
  check.Require(a.table.rank() == 2, "table", a.table, fmt::format("{}[vocab, dim]", DTypeName(t)))
      .Place("table", a.table)
      .Require(a.tokens.count >= 0, "out", a.out, "a non-negative token count")
      .Numel("out", a.out, t, a.tokens.count * dim, fmt::format("[{}, {}]", a.tokens.count, dim))
      .Require(LastDim(a.out) == dim, "out", a.out,
               fmt::format("{}[{}, {}]", DTypeName(t), a.tokens.count, dim))
      .Int32("tokens", a.tokens, RowsOf(a.out));
  SLUICE_RETURN_IF_ERROR(check.status());
  SLUICE_RETURN_IF_ERROR(CheckShard(kOp, "table", a.table.dim(0), a.shard));
  return DoEmbeddingForward(stream, a);
}

Status OpsBackend::EmbeddingBackward(Stream& stream, const EmbeddingBackwardArgs& a) {
  constexpr std::string_view kOp = "EmbeddingBackward";
  ArgCheck check(kOp, device(), "dout", a.dout, CheckCompute(kOp, "dout", a.dout));
  const DType acc = AccumDType(a.dout.dtype());
  const int64_t dim = LastDim(a.dout);
  const int64_t vocab = a.dtable.rank() == 2 ? a.dtable.dim(0) : 0;
  check.Place("dout", a.dout)
      .Require(a.dtable.rank() == 2, "dtable", a.dtable,
               fmt::format("{}[vocab, {}]", DTypeName(acc), dim))
      .Exact("dtable", a.dtable, acc, Shape{vocab, dim})
      .Int32("tokens", a.tokens, RowsOf(a.dout));
  SLUICE_RETURN_IF_ERROR(check.status());
  SLUICE_RETURN_IF_ERROR(CheckShard(kOp, "dtable", vocab, a.shard));
  return DoEmbeddingBackward(stream, a);
}

namespace {

// x [batch, seq, dim] (the check's anchor) and a position table wpe [positions >= seq, dim].
Status CheckPositionEmbedding(ArgCheck& check, std::string_view x_name, const Tensor& x,
                              std::string_view wpe_name, const Tensor& wpe, DType wpe_dtype) {
  check.Require(x.rank() == 3, x_name, x, fmt::format("{}[batch, seq, dim]", DTypeName(x.dtype())))
      .Place(x_name, x);
  SLUICE_RETURN_IF_ERROR(check.status());
  const int64_t seq = x.dim(1);
  const int64_t dim = x.dim(2);
  check
      .Require(wpe.rank() == 2 && wpe.dim(0) >= seq, wpe_name, wpe,
               fmt::format("{}[positions >= {}, {}]", DTypeName(wpe_dtype), seq, dim))
      .Exact(wpe_name, wpe, wpe_dtype, Shape{wpe.rank() == 2 ? wpe.dim(0) : 0, dim});
  return check.status();
}

}  // namespace

Status OpsBackend::PositionEmbeddingForward(Stream& stream, const PositionEmbeddingForwardArgs& a) {
  constexpr std::string_view kOp = "PositionEmbeddingForward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  SLUICE_RETURN_IF_ERROR(CheckPositionEmbedding(check, "x", a.x, "wpe", a.wpe, a.x.dtype()));
  return DoPositionEmbeddingForward(stream, a);
}

Status OpsBackend::PositionEmbeddingBackward(Stream& stream,
                                             const PositionEmbeddingBackwardArgs& a) {
  constexpr std::string_view kOp = "PositionEmbeddingBackward";
  ArgCheck check(kOp, device(), "dx", a.dx, CheckCompute(kOp, "dx", a.dx));
  SLUICE_RETURN_IF_ERROR(
      CheckPositionEmbedding(check, "dx", a.dx, "dwpe", a.dwpe, AccumDType(a.dx.dtype())));
  return DoPositionEmbeddingBackward(stream, a);
}

namespace {

// The attention dims of q [b, s, hq, d] (the check's anchor) and k [b, s, hkv, d], or the error
// naming what is wrong.
Result<kernels::AttentionDims> AttentionShapes(std::string_view op, ArgCheck& check,
                                               const Tensor& q, const Tensor& k) {
  const DType t = q.dtype();
  check
      .Require(q.rank() == 4, "q", q,
               fmt::format("{}[batch, seq, q_heads, head_dim]", DTypeName(t)))
      .Place("q", q);
  SLUICE_RETURN_IF_ERROR(check.status());
  check.Require(
      k.rank() == 4, "k", k,
      fmt::format("{}[{}, {}, kv_heads, {}]", DTypeName(t), q.dim(0), q.dim(1), q.dim(3)));
  SLUICE_RETURN_IF_ERROR(check.status());
  check.Exact("k", k, t, Shape{q.dim(0), q.dim(1), k.dim(2), q.dim(3)});
  SLUICE_RETURN_IF_ERROR(check.status());
  const kernels::AttentionDims dims{.batch = q.dim(0),
                                    .seq = q.dim(1),
                                    .q_heads = q.dim(2),
                                    .kv_heads = k.dim(2),
                                    .head_dim = q.dim(3)};
  const std::string error = kernels::AttentionDimsError(dims);
  if (!error.empty()) {
    return InvalidArgumentError("{}: {} (q is {}, k is {})", op, error, Describe(q), Describe(k));
  }
  return dims;
}

}  // namespace

Status OpsBackend::AttentionForward(Stream& stream, const AttentionForwardArgs& a) {
  constexpr std::string_view kOp = "AttentionForward";
  ArgCheck check(kOp, device(), "q", a.q, CheckCompute(kOp, "q", a.q));
  SLUICE_ASSIGN_OR_RETURN(const kernels::AttentionDims d, AttentionShapes(kOp, check, a.q, a.k));
  check.Like("v", a.v, a.k)
      .Like("out", a.out, a.q)
      .Exact("lse", a.lse, AccumDType(a.q.dtype()), Shape{d.batch, d.q_heads, d.seq});
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoAttentionForward(stream, a);
}

Status OpsBackend::AttentionBackward(Stream& stream, const AttentionBackwardArgs& a) {
  constexpr std::string_view kOp = "AttentionBackward";
  ArgCheck check(kOp, device(), "q", a.q, CheckCompute(kOp, "q", a.q));
  SLUICE_ASSIGN_OR_RETURN(const kernels::AttentionDims d, AttentionShapes(kOp, check, a.q, a.k));
  check.Like("v", a.v, a.k)
      .Like("out", a.out, a.q)
      .Exact("lse", a.lse, AccumDType(a.q.dtype()), Shape{d.batch, d.q_heads, d.seq})
      .Like("dout", a.dout, a.q)
      .Like("dq", a.dq, a.q)
      .Like("dk", a.dk, a.k)
      .Like("dv", a.dv, a.k);
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoAttentionBackward(stream, a);
}

Status OpsBackend::CrossEntropyForward(Stream& stream, const CrossEntropyForwardArgs& a) {
  constexpr std::string_view kOp = "CrossEntropyForward";
  ArgCheck check(kOp, device(), "logits", a.logits, CheckCompute(kOp, "logits", a.logits));
  const DType acc = AccumDType(a.logits.dtype());
  const int64_t rows = RowsOf(a.logits);
  check.Place("logits", a.logits)
      .Int32("targets", a.targets, rows)
      .Elements("lse", a.lse, acc, rows)
      .Numel("loss", a.loss, acc, 1, "[] (one element)");
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoCrossEntropyForward(stream, a);
}

Status OpsBackend::CrossEntropyBackward(Stream& stream, const CrossEntropyBackwardArgs& a) {
  constexpr std::string_view kOp = "CrossEntropyBackward";
  ArgCheck check(kOp, device(), "logits", a.logits, CheckCompute(kOp, "logits", a.logits));
  const int64_t rows = RowsOf(a.logits);
  check.Place("logits", a.logits)
      .Int32("targets", a.targets, rows)
      .Elements("lse", a.lse, AccumDType(a.logits.dtype()), rows)
      .Like("dlogits", a.dlogits, a.logits);
  SLUICE_RETURN_IF_ERROR(check.status());
  SLUICE_RETURN_IF_ERROR(CheckShard(kOp, "logits", LastDim(a.logits), a.shard));
  return DoCrossEntropyBackward(stream, a);
}

Status OpsBackend::CrossEntropyShardForward(Stream& stream, const CrossEntropyShardForwardArgs& a) {
  constexpr std::string_view kOp = "CrossEntropyShardForward";
  ArgCheck check(kOp, device(), "logits", a.logits, CheckCompute(kOp, "logits", a.logits));
  const DType acc = AccumDType(a.logits.dtype());
  const int64_t rows = RowsOf(a.logits);
  check.Place("logits", a.logits)
      .Require(LastDim(a.logits) > 0, "logits", a.logits, "at least one column")
      .Int32("targets", a.targets, rows)
      .Elements("piece_lse", a.piece_lse, acc, rows)
      .Elements("target_logit", a.target_logit, acc, rows);
  SLUICE_RETURN_IF_ERROR(check.status());
  if (!a.shard.piece()) {
    return InvalidArgumentError("{}: no vocabulary piece given (shard.vocab is 0)", kOp);
  }
  SLUICE_RETURN_IF_ERROR(CheckShard(kOp, "logits", LastDim(a.logits), a.shard));
  return DoCrossEntropyShardForward(stream, a);
}

Status OpsBackend::CrossEntropyShardLoss(Stream& stream, const CrossEntropyShardLossArgs& a) {
  constexpr std::string_view kOp = "CrossEntropyShardLoss";
  ArgCheck check(kOp, device(), "target_logit", a.target_logit,
                 CheckCompute(kOp, "target_logit", a.target_logit));
  const DType acc = a.target_logit.dtype();
  const int64_t rows = a.target_logit.numel();
  check.Place("target_logit", a.target_logit)
      .Require(a.piece_lse.rank() == 2 && a.piece_lse.dim(0) >= 1, "piece_lse", a.piece_lse,
               fmt::format("{}[pieces, {}]", DTypeName(acc), rows))
      .Exact("piece_lse", a.piece_lse, acc,
             Shape{a.piece_lse.rank() == 2 ? a.piece_lse.dim(0) : 1, rows})
      .Int32("targets", a.targets, rows)
      .Elements("lse", a.lse, acc, rows)
      .Numel("loss", a.loss, acc, 1, "[] (one element)");
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoCrossEntropyShardLoss(stream, a);
}

Status OpsBackend::LayerNormForward(Stream& stream, const LayerNormForwardArgs& a) {
  constexpr std::string_view kOp = "LayerNormForward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  const DType t = a.x.dtype();
  const int64_t rows = RowsOf(a.x);
  const int64_t cols = LastDim(a.x);
  check.Place("x", a.x)
      .Exact("gamma", a.gamma, t, Shape{cols})
      .Optional("beta", a.beta, t, Shape{cols})
      .Like("y", a.y, a.x)
      .Elements("mean", a.mean, AccumDType(t), rows)
      .Elements("rstd", a.rstd, AccumDType(t), rows);
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoLayerNormForward(stream, a);
}

Status OpsBackend::LayerNormBackward(Stream& stream, const LayerNormBackwardArgs& a) {
  constexpr std::string_view kOp = "LayerNormBackward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  const DType t = a.x.dtype();
  const DType acc = AccumDType(t);
  const int64_t rows = RowsOf(a.x);
  const int64_t cols = LastDim(a.x);
  check.Place("x", a.x)
      .Exact("gamma", a.gamma, t, Shape{cols})
      .Elements("mean", a.mean, acc, rows)
      .Elements("rstd", a.rstd, acc, rows)
      .Like("dy", a.dy, a.x)
      .Like("dx", a.dx, a.x)
      .Exact("dgamma", a.dgamma, acc, Shape{cols})
      .Optional("dbeta", a.dbeta, acc, Shape{cols});
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoLayerNormBackward(stream, a);
}

Status OpsBackend::RmsNormForward(Stream& stream, const RmsNormForwardArgs& a) {
  constexpr std::string_view kOp = "RmsNormForward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  const DType t = a.x.dtype();
  check.Place("x", a.x)
      .Exact("gamma", a.gamma, t, Shape{LastDim(a.x)})
      .Like("y", a.y, a.x)
      .Elements("rstd", a.rstd, AccumDType(t), RowsOf(a.x));
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoRmsNormForward(stream, a);
}

Status OpsBackend::RmsNormBackward(Stream& stream, const RmsNormBackwardArgs& a) {
  constexpr std::string_view kOp = "RmsNormBackward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  const DType t = a.x.dtype();
  const int64_t cols = LastDim(a.x);
  check.Place("x", a.x)
      .Exact("gamma", a.gamma, t, Shape{cols})
      .Elements("rstd", a.rstd, AccumDType(t), RowsOf(a.x))
      .Like("dy", a.dy, a.x)
      .Like("dx", a.dx, a.x)
      .Exact("dgamma", a.dgamma, AccumDType(t), Shape{cols});
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoRmsNormBackward(stream, a);
}

Status OpsBackend::GeluForward(Stream& stream, const GeluForwardArgs& a) {
  constexpr std::string_view kOp = "GeluForward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  SLUICE_RETURN_IF_ERROR(check.Place("x", a.x).Like("y", a.y, a.x).status());
  return DoGeluForward(stream, a);
}

Status OpsBackend::GeluBackward(Stream& stream, const GeluBackwardArgs& a) {
  constexpr std::string_view kOp = "GeluBackward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  SLUICE_RETURN_IF_ERROR(
      check.Place("x", a.x).Like("dy", a.dy, a.x).Like("dx", a.dx, a.x).status());
  return DoGeluBackward(stream, a);
}

Status OpsBackend::SwiGluForward(Stream& stream, const SwiGluForwardArgs& a) {
  constexpr std::string_view kOp = "SwiGluForward";
  ArgCheck check(kOp, device(), "gate", a.gate, CheckCompute(kOp, "gate", a.gate));
  check.Place("gate", a.gate).Like("up", a.up, a.gate).Like("y", a.y, a.gate);
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoSwiGluForward(stream, a);
}

Status OpsBackend::SwiGluBackward(Stream& stream, const SwiGluBackwardArgs& a) {
  constexpr std::string_view kOp = "SwiGluBackward";
  ArgCheck check(kOp, device(), "gate", a.gate, CheckCompute(kOp, "gate", a.gate));
  check.Place("gate", a.gate)
      .Like("up", a.up, a.gate)
      .Like("dy", a.dy, a.gate)
      .Like("dgate", a.dgate, a.gate)
      .Like("dup", a.dup, a.gate);
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoSwiGluBackward(stream, a);
}

namespace {

// in [batch, seq, heads, even head_dim] (the check's anchor) and out like it.
Status CheckRope(ArgCheck& check, std::string_view in_name, const Tensor& in,
                 std::string_view out_name, const Tensor& out) {
  check
      .Require(in.rank() == 4 && in.dim(3) % 2 == 0, in_name, in,
               fmt::format("{}[batch, seq, heads, even head_dim]", DTypeName(in.dtype())))
      .Place(in_name, in)
      .Like(out_name, out, in);
  return check.status();
}

}  // namespace

Status OpsBackend::RopeForward(Stream& stream, const RopeForwardArgs& a) {
  constexpr std::string_view kOp = "RopeForward";
  ArgCheck check(kOp, device(), "x", a.x, CheckCompute(kOp, "x", a.x));
  SLUICE_RETURN_IF_ERROR(CheckRope(check, "x", a.x, "y", a.y));
  return DoRopeForward(stream, a);
}

Status OpsBackend::RopeBackward(Stream& stream, const RopeBackwardArgs& a) {
  constexpr std::string_view kOp = "RopeBackward";
  ArgCheck check(kOp, device(), "dy", a.dy, CheckCompute(kOp, "dy", a.dy));
  SLUICE_RETURN_IF_ERROR(CheckRope(check, "dy", a.dy, "dx", a.dx));
  return DoRopeBackward(stream, a);
}

Status OpsBackend::Add(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) {
  ArgCheck check("Add", device(), "a", a, CheckCompute("Add", "a", a));
  SLUICE_RETURN_IF_ERROR(check.Place("a", a).Like("b", b, a).Like("y", y, a).status());
  return DoAdd(stream, a, b, y);
}

Status OpsBackend::Accumulate(Stream& stream, const Tensor& x, const Tensor& y) {
  constexpr std::string_view kOp = "Accumulate";
  if (IsAbsent(x)) return InvalidArgumentError("Accumulate: x is empty, expected a tensor");
  ArgCheck check(kOp, device(), "x", x);
  const bool widening =
      y.dtype() == DType::kF32 && (x.dtype() == DType::kBF16 || x.dtype() == DType::kF16);
  check.Place("x", x)
      .Require(!IsAbsent(y) && (y.dtype() == x.dtype() || widening), "y", y,
               fmt::format("{} or f32{}", DTypeName(x.dtype()), x.shape().ToString()))
      .Require(y.numel() == x.numel(), "y", y,
               fmt::format("{}{}", DTypeName(y.dtype()), x.shape().ToString()))
      .Place("y", y);
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoAccumulate(stream, x, y);
}

Status OpsBackend::AdamStep(Stream& stream, const AdamStepArgs& a) {
  constexpr std::string_view kOp = "AdamStep";
  const std::string hyper_error = kernels::AdamHyperparamsError(a.hyper);
  if (!hyper_error.empty()) return InvalidArgumentError("{}: {}", kOp, hyper_error);
  const int64_t n = a.params.numel();
  ArgCheck check(kOp, device(), "params", a.params);
  check.Elements("params", a.params, DType::kF32, n)
      .Elements("exp_avg", a.exp_avg, DType::kF32, n)
      .Elements("exp_avg_sq", a.exp_avg_sq, DType::kF32, n)
      .Require(!IsAbsent(a.grads) && a.grads.dtype() != DType::kF64 && a.grads.numel() == n,
               "grads", a.grads, fmt::format("f32, bf16 or f16[{}]", n))
      .Place("grads", a.grads)
      .Require(IsAbsent(a.param_copy) ||
                   ((a.param_copy.dtype() == DType::kBF16 || a.param_copy.dtype() == DType::kF16) &&
                    a.param_copy.numel() == n),
               "param_copy", a.param_copy, fmt::format("empty, or bf16 or f16[{}]", n))
      .Place("param_copy", a.param_copy);
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoAdamStep(stream, a);
}

Status OpsBackend::Convert(Stream& stream, const Tensor& src, const Tensor& dst) {
  ArgCheck check("Convert", device(), "src", src);
  const bool pair =
      (src.dtype() == DType::kF32 && (dst.dtype() == DType::kBF16 || dst.dtype() == DType::kF16)) ||
      (dst.dtype() == DType::kF32 && (src.dtype() == DType::kBF16 || src.dtype() == DType::kF16));
  check.Place("src", src)
      .Require(!IsAbsent(dst) && pair && dst.numel() == src.numel(), "dst", dst,
               fmt::format("{}[{} elements] (f32 <-> bf16 or f16)",
                           src.dtype() == DType::kF32 ? "bf16 or f16" : "f32", src.numel()))
      .Place("dst", dst);
  SLUICE_RETURN_IF_ERROR(check.status());
  return DoConvert(stream, src, dst);
}

Status OpsBackend::SquaredSum(Stream& stream, const Tensor& x, const Tensor& out) {
  ArgCheck check("SquaredSum", device(), "x", x);
  SLUICE_RETURN_IF_ERROR(
      check.Place("x", x).Numel("out", out, DType::kF64, 1, "[] (one element)").status());
  return DoSquaredSum(stream, x, out);
}

Status OpsBackend::BlockSquaredSums(Stream& stream, const Tensor& x, const BlockSumList& list,
                                    const Tensor& out) {
  ArgCheck check("BlockSquaredSums", device(), "x", x);
  SLUICE_RETURN_IF_ERROR(check.Place("x", x)
                             .Require(x.dtype() == DType::kF32, "x", x, "f32")
                             .Numel("out", out, DType::kF64, list.blocks,
                                    fmt::format("[{}] (one per block)", list.blocks))
                             .status());
  if (list.blocks < 0 || (list.blocks > 0 && (list.pieces == nullptr || list.first == nullptr))) {
    return InvalidArgumentError(
        "BlockSquaredSums: {} blocks, pieces at {}, first at {}: expected "
        "device arrays",
        list.blocks, static_cast<const void*>(list.pieces), static_cast<const void*>(list.first));
  }
  if (list.blocks == 0) return OkStatus();
  return DoBlockSquaredSums(stream, x, list, out);
}

Status OpsBackend::FlagInfOrNan(Stream& stream, const Tensor& x, int32_t* flag) {
  SLUICE_RETURN_IF_ERROR(ArgCheck("FlagInfOrNan", device(), "x", x).Place("x", x).status());
  if (flag == nullptr)
    return InvalidArgumentError("FlagInfOrNan: flag is null (x is {})", Describe(x));
  return DoFlagInfOrNan(stream, x, flag);
}

Status OpsBackend::Fill(Stream& stream, const Tensor& y, double value) {
  SLUICE_RETURN_IF_ERROR(ArgCheck("Fill", device(), "y", y).Place("y", y).status());
  return DoFill(stream, y, value);
}

Status OpsBackend::Scale(Stream& stream, const Tensor& y, double factor) {
  ArgCheck check("Scale", device(), "y", y);
  check
      .Require(!IsAbsent(y) && (y.dtype() == DType::kF32 || y.dtype() == DType::kF64), "y", y,
               "an f32 or f64 tensor")
      .Place("y", y);
  SLUICE_RETURN_IF_ERROR(check.status());
  if (!std::isfinite(factor)) {
    return InvalidArgumentError("Scale: factor {} is not finite (y is {})", factor, Describe(y));
  }
  return DoScale(stream, y, factor);
}

Status OpsBackend::CopySegments(Stream& stream, const Tensor& src, const Tensor& dst,
                                const CopySegmentList& segments) {
  ArgCheck check("CopySegments", device(), "src", src);
  const bool pair = src.dtype() == dst.dtype() ||
                    (src.dtype() == DType::kF32 && dst.dtype() != DType::kF64) ||
                    (dst.dtype() == DType::kF32 && src.dtype() != DType::kF64);
  check.Place("src", src)
      .Require(!IsAbsent(dst) && pair, "dst", dst, "the same dtype as src, or f32 <-> bf16 / f16")
      .Place("dst", dst);
  SLUICE_RETURN_IF_ERROR(check.status());
  if (segments.count < 0 || (segments.count > 0 && segments.data == nullptr)) {
    return InvalidArgumentError("CopySegments: {} segments at {}, expected a device array",
                                segments.count, static_cast<const void*>(segments.data));
  }
  if (segments.count == 0) return OkStatus();
  return DoCopySegments(stream, src, dst, segments);
}

Status OpsBackend::AccumulateSegments(Stream& stream, const Tensor& src, const Tensor& dst,
                                      const CopySegmentList& segments) {
  ArgCheck check("AccumulateSegments", device(), "src", src);
  check.Place("src", src)
      .Require(src.dtype() == DType::kF32, "src", src, "f32")
      .Require(!IsAbsent(dst) && dst.dtype() == DType::kF32, "dst", dst, "f32")
      .Place("dst", dst);
  SLUICE_RETURN_IF_ERROR(check.status());
  if (segments.count < 0 || (segments.count > 0 && segments.data == nullptr)) {
    return InvalidArgumentError("AccumulateSegments: {} segments at {}, expected a device array",
                                segments.count, static_cast<const void*>(segments.data));
  }
  if (segments.count == 0) return OkStatus();
  return DoAccumulateSegments(stream, src, dst, segments);
}

}  // namespace sluice::ops
