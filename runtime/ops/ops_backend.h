// The ops backend table: every numeric op on device memory as a launcher chosen at run time by the
// device kind (ggml's backend interface, llm.c's explicit stream on every kernel). One backend
// per device kind (runtime/ops/cpu, runtime/ops/cuda) plus the fp64 reference (runtime/ops/ref);
// create one with CreateOpsBackend / CreateReferenceOpsBackend (runtime/ops/ops_factory.h).
//
// The contract, shared by every backend:
// - Each op takes the Stream it runs on and Tensor views of device memory of the backend's
//   Device (tier kDevice), and returns once the work is enqueued, as a CUDA launch does. The
//   returned Status covers what is known at enqueue time: a shape, dtype or tier that does not fit
//   (InvalidArgument naming the op, the tensor and what was expected), a compute dtype the backend
//   lacks (Unimplemented), a launch the device refused. What goes wrong while the op runs (a token
//   id outside the vocabulary on the CPU, a CUDA fault) becomes the stream's sticky error, named
//   after the op, and is returned by the stream's next Synchronize / Query (runtime/device.h).
// - The compute dtype is a run-time property: the dtype of the op's activations (x, q, logits,
// ...).
//   Parameters (w, b, gamma, beta, table, wpe) are in the compute dtype too. Saved statistics
//   (lse, mean, rstd), parameter gradients (dw, db, dgamma, dbeta, dtable, dwpe) and the loss are
//   in AccumDType(compute): fp32 for the 16-bit and fp32 compute dtypes, fp64 for the reference.
//   Input gradients (dx) are in the compute dtype and OVERWRITTEN; parameter gradients ACCUMULATE
//   (+=), as PyTorch's .grad and kernels/ref/ops_linear.h state.
// - A gradient (or bias) that is not wanted is an empty Tensor (`Tensor()`, null data).
// - Integer inputs (token ids, targets) are Int32View, flags a device int32_t*: DType names the
//   floating-point element types only.
// - Scratch memory: the backend owns it, per stream, grown on demand from the Device (charged to
//   the memory ledger as device `buffers`) and freed stream-ordered when it grows. Why not a
//   workspace Tensor per op: what an op needs differs by backend (the CPU attention keeps a
//   [seq, seq] score block, CUDA's FlashAttention none but a per-row D vector, cuBLASLt a
//   per-stream workspace that must never be shared between streams), so a caller-supplied
//   workspace would leak each backend's kernel choices into the engine. Per-stream keeps
//   concurrent streams from racing on one buffer, as cuBLAS requires. Scratch only grows; the
//   engine sees it in the ledger and can drop a stream's with ReleaseScratch.
// - A backend may be used from several threads on different streams at once; one stream's ops
//   are enqueued by one thread at a time (as with a cuBLAS handle).
//
// Until the engine is migrated onto this table, engine/model still uses the compile-time
// Ops<float> / Ops<double> of engine/model/ops_backend.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/ref/adam_ref.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace sluice::ops {

// The dtype of saved statistics, parameter gradients and the loss for a compute dtype.
constexpr DType AccumDType(DType compute) {
  return compute == DType::kF64 ? DType::kF64 : DType::kF32;
}

// int32 values in device memory (token ids, targets), flat.
struct Int32View {
  const int32_t* data = nullptr;
  int64_t count = 0;
};

// One piece of a segment copy, in elements: dst[dst_offset + i] = src[src_offset + i] for
// i < count, then dst[dst_offset + count + j] = 0 for j < zero_fill (a ZeRO partition's padding).
// Laid out as kernels::cuda::FlatSegment, so the CUDA backend passes the array as it is.
struct CopySegment {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t count = 0;
  int64_t zero_fill = 0;
};

// An array of CopySegment in device memory, built once per layout (the host never reads it).
// max_segment_elements (largest count + zero_fill) sizes the CUDA grid only.
struct CopySegmentList {
  const CopySegment* data = nullptr;
  int count = 0;
  int64_t max_segment_elements = 0;
};

// The pieces of a blocked squared sum (laid out as kernels::cuda::SumPiece): block j is
// pieces[first[j]] .. pieces[first[j + 1] - 1], each `count` elements of x from `offset`. Both
// arrays in device memory, built once per layout (the host never reads them).
struct SumPiece {
  int64_t offset = 0;
  int64_t count = 0;
};
struct BlockSumList {
  const SumPiece* pieces = nullptr;
  const int64_t* first = nullptr;  // blocks + 1 entries
  int64_t blocks = 0;
};

// --- Arguments of the layer ops. Shapes: `...` is any leading dimensions (rows = their product).

// x [..., in], w [out, in], b [out] or empty, y [..., out]: y = x·wᵀ + b.
struct LinearForwardArgs {
  Tensor x, w, b, y;
};
// dy [..., out]; dx [..., in] (compute, overwritten) or empty; dw [out, in], db [out] (accum, +=)
// or empty.
struct LinearBackwardArgs {
  Tensor x, w, dy, dx, dw, db;
};
// A piece of the vocabulary split over tensor-parallel ranks (kernels/ref/ops_vocab_shard.h): a
// table whose rows, or logits whose columns, are the ids [start, start + rows or columns) of a
// vocabulary of `vocab` ids. The default (vocab 0) is no piece: the table or logits are the whole
// vocabulary. Ids and targets stay ids of the whole vocabulary, checked against `vocab`.
struct VocabShard {
  int64_t start = 0;
  int64_t vocab = 0;
  bool piece() const { return vocab > 0; }
};

// tokens [n] in [0, vocab), table [vocab, dim], out [..., dim] with n rows. invalid_token (device
// int32, optional) is set to 1 when an id is outside the vocabulary; the CPU backends also make
// that the stream's sticky error, CUDA zeroes the row (kernels/cuda/embedding.h). With a `shard`
// piece the table holds its rows only, and an id of the vocabulary outside them looks up zeros.
struct EmbeddingForwardArgs {
  Int32View tokens;
  Tensor table, out;
  int32_t* invalid_token = nullptr;
  VocabShard shard;
};
// dout [..., dim] with n rows, dtable [vocab, dim] (accum, +=); with a `shard` piece only the ids
// it holds accumulate, into its rows.
struct EmbeddingBackwardArgs {
  Int32View tokens;
  Tensor dout, dtable;
  int32_t* invalid_token = nullptr;
  VocabShard shard;
};
// wpe [positions, dim], x [batch, seq, dim] with seq <= positions: x += wpe[:seq] (in place).
struct PositionEmbeddingForwardArgs {
  Tensor wpe, x;
};
// dx [batch, seq, dim], dwpe [positions, dim] (accum, +=).
struct PositionEmbeddingBackwardArgs {
  Tensor dx, dwpe;
};
// Causal attention (kernels/ref/ops_attention.h): q, out [batch, seq, q_heads, head_dim];
// k, v [batch, seq, kv_heads, head_dim]; lse [batch, q_heads, seq] (accum).
struct AttentionForwardArgs {
  Tensor q, k, v, out, lse;
};
// dout, dq like q; dk, dv like k; all overwritten.
struct AttentionBackwardArgs {
  Tensor q, k, v, out, lse, dout, dq, dk, dv;
};
// logits [..., vocab] with rows rows, targets [rows] (kernels::kIgnoreIndex skips a row),
// lse [rows] (accum), loss: one accum element (the mean over counted rows, 0 when none), written
// on the device so that the host reads it back with a copy and an event.
struct CrossEntropyForwardArgs {
  Tensor logits;
  Int32View targets;
  Tensor lse, loss;
  int32_t* invalid_target = nullptr;
};
// dloss: the gradient of the mean loss (loss scale, 1 / accumulation steps), a host value,
// rounded to the compute dtype's accumulation type (fp32 on cpu and cuda; exact on ref).
// dlogits like logits, overwritten; may be logits itself. With a `shard` piece the logits are
// its columns, lse the whole vocabulary's (CrossEntropyShardLoss), and the target's -1 lands on
// the piece that holds it.
struct CrossEntropyBackwardArgs {
  Tensor logits;
  Int32View targets;
  Tensor lse;
  double dloss = 1.0;
  Tensor dlogits;
  int32_t* invalid_target = nullptr;
  VocabShard shard;
};
// The vocabulary-parallel cross-entropy (kernels/ref/ops_vocab_shard.h), around the caller's
// collectives. Forward of a piece: logits [..., cols] (the columns of `shard`), targets [rows]
// (ids of the whole vocabulary), piece_lse and target_logit [rows] (accum, overwritten): the
// piece's log-sum-exp of each row, and the target's logit where the piece holds it, else 0.
struct CrossEntropyShardForwardArgs {
  Tensor logits;
  Int32View targets;
  VocabShard shard;
  Tensor piece_lse, target_logit;
  int32_t* invalid_target = nullptr;
};
// The loss from every piece's log-sum-exp (piece_lse [pieces, rows], gathered) and the target
// logits (target_logit [rows], summed over the pieces): lse [rows] (accum, overwritten, saved for
// the backward) and loss (one accum element: the mean over the rows not ignored, 0 when none).
struct CrossEntropyShardLossArgs {
  Tensor piece_lse, target_logit;
  Int32View targets;
  Tensor lse, loss;
};
// x, y [..., cols]; gamma [cols], beta [cols] or empty; mean, rstd [rows] (accum, saved).
struct LayerNormForwardArgs {
  Tensor x, gamma, beta, y, mean, rstd;
  float eps = 1e-5f;
};
// dy, dx like x (dx overwritten); dgamma [cols], dbeta [cols] or empty (accum, +=).
struct LayerNormBackwardArgs {
  Tensor x, gamma, mean, rstd, dy, dx, dgamma, dbeta;
};
struct RmsNormForwardArgs {
  Tensor x, gamma, y, rstd;
  float eps = 1e-6f;
};
struct RmsNormBackwardArgs {
  Tensor x, gamma, rstd, dy, dx, dgamma;
};
// Elementwise, all of one shape: y = gelu_tanh(x); dx = dy * gelu'(x).
struct GeluForwardArgs {
  Tensor x, y;
};
struct GeluBackwardArgs {
  Tensor x, dy, dx;
};
// y = silu(gate) * up.
struct SwiGluForwardArgs {
  Tensor gate, up, y;
};
struct SwiGluBackwardArgs {
  Tensor gate, up, dy, dgate, dup;
};
// x, y [batch, seq, heads, head_dim], head_dim even; y may be x.
struct RopeForwardArgs {
  Tensor x, y;
  float theta = 10000.0f;
};
struct RopeBackwardArgs {
  Tensor dy, dx;
  float theta = 10000.0f;
};

// --- Arguments of the flat ops (any shapes of equal element counts).

// One Adam/AdamW step (kernels/ref/adam_ref.h semantics): params, exp_avg, exp_avg_sq f32;
// grads f32, bf16 or f16; param_copy bf16, f16 or empty (the low-precision copy of the result).
struct AdamStepArgs {
  Tensor params, exp_avg, exp_avg_sq, grads, param_copy;
  kernels::AdamHyperparams hyper;
  float grad_scale = 1.0f;  // loss-scale inverse times clip coefficient
};

// How the linear layers multiply fp32 matrices, a run-time choice like PyTorch's
// float32_matmul_precision: kFp32 exactly; kTf32 / kBf16 with the inputs rounded to TF32 / bf16
// and fp32 accumulation and output, on a GPU's tensor cores.
enum class MatmulPrecision { kFp32, kTf32, kBf16 };
std::string_view MatmulPrecisionName(MatmulPrecision precision);
// "fp32", "tf32" or "bf16" (the model.matmul_precision setting).
Result<MatmulPrecision> ParseMatmulPrecision(std::string_view name);

class OpsBackend {
 public:
  virtual ~OpsBackend() = default;
  OpsBackend(const OpsBackend&) = delete;
  OpsBackend& operator=(const OpsBackend&) = delete;

  Device& device() const { return *device_; }
  DeviceKind kind() const { return device_->kind(); }
  // "cpu", "ref", "cuda": which column of the table this is.
  virtual std::string_view name() const = 0;
  // Whether the layer ops run with this compute dtype (cpu: f32; ref: f64; cuda: f32, bf16).
  virtual bool Supports(DType compute) const = 0;
  // Whether the ops take a piece of the vocabulary (VocabShard, CrossEntropyShard*): the host
  // columns; not cuda yet, whose calls with a piece are Unimplemented.
  virtual bool SupportsVocabShards() const { return true; }
  // Sets the math of the fp32 products enqueued from now on (kFp32 until set). The host columns
  // compute in fp32 only and refuse the others (Unimplemented, naming the precision).
  virtual Status SetMatmulPrecision(MatmulPrecision precision);

  // Drops the scratch memory kept for `stream` (freed on it, stream-ordered). Call before
  // destroying a stream the backend outlives.
  virtual void ReleaseScratch(Stream& stream) = 0;

  // Layer ops, forward and backward.
  Status LinearForward(Stream& stream, const LinearForwardArgs& args);
  Status LinearBackward(Stream& stream, const LinearBackwardArgs& args);
  Status EmbeddingForward(Stream& stream, const EmbeddingForwardArgs& args);
  Status EmbeddingBackward(Stream& stream, const EmbeddingBackwardArgs& args);
  Status PositionEmbeddingForward(Stream& stream, const PositionEmbeddingForwardArgs& args);
  Status PositionEmbeddingBackward(Stream& stream, const PositionEmbeddingBackwardArgs& args);
  Status AttentionForward(Stream& stream, const AttentionForwardArgs& args);
  Status AttentionBackward(Stream& stream, const AttentionBackwardArgs& args);
  Status CrossEntropyForward(Stream& stream, const CrossEntropyForwardArgs& args);
  Status CrossEntropyBackward(Stream& stream, const CrossEntropyBackwardArgs& args);
  Status CrossEntropyShardForward(Stream& stream, const CrossEntropyShardForwardArgs& args);
  Status CrossEntropyShardLoss(Stream& stream, const CrossEntropyShardLossArgs& args);
  Status LayerNormForward(Stream& stream, const LayerNormForwardArgs& args);
  Status LayerNormBackward(Stream& stream, const LayerNormBackwardArgs& args);
  Status RmsNormForward(Stream& stream, const RmsNormForwardArgs& args);
  Status RmsNormBackward(Stream& stream, const RmsNormBackwardArgs& args);
  Status GeluForward(Stream& stream, const GeluForwardArgs& args);
  Status GeluBackward(Stream& stream, const GeluBackwardArgs& args);
  Status SwiGluForward(Stream& stream, const SwiGluForwardArgs& args);
  Status SwiGluBackward(Stream& stream, const SwiGluBackwardArgs& args);
  Status RopeForward(Stream& stream, const RopeForwardArgs& args);
  Status RopeBackward(Stream& stream, const RopeBackwardArgs& args);
  // y = a + b (the residual add), all in the compute dtype; y may be a or b.
  Status Add(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);
  // y += x: same dtype, or a bf16 x into an f32 y (gradient accumulation into fp32; the host
  // columns also take f16).
  Status Accumulate(Stream& stream, const Tensor& x, const Tensor& y);

  // Flat ops: the optimizer and ZeRO's shard handling.
  Status AdamStep(Stream& stream, const AdamStepArgs& args);
  // dst = src converted, f32 <-> bf16 and f32 <-> f16, round to nearest even (kernels/ref/half.h).
  Status Convert(Stream& stream, const Tensor& src, const Tensor& dst);
  // *out = sum of double(x[i])^2 (out: one f64 element, overwritten): the local part of the
  // global gradient norm.
  Status SquaredSum(Stream& stream, const Tensor& x, const Tensor& out);
  // out[j] = sum of double(x[i])^2 over block j of `list` (x f32, out f64[list.blocks],
  // overwritten): the blocked gradient norm of a ZeRO shard (engine/zero/shard_grad_norm.h). The
  // host columns add a block's elements one after another in piece order; CUDA in a fixed tree.
  Status BlockSquaredSums(Stream& stream, const Tensor& x, const BlockSumList& list,
                          const Tensor& out);
  // *flag = 1 when any x[i] is inf or NaN, left as it is otherwise (zero it once, OR many in).
  Status FlagInfOrNan(Stream& stream, const Tensor& x, int32_t* flag);
  // Every element of y = value rounded to y's dtype.
  Status Fill(Stream& stream, const Tensor& y, double value);
  // y[i] *= factor in place, the factor rounded to y's dtype first and each product rounded once
  // (kernels/ref/ops_elementwise.h): ZeRO's gradient scaling around the reduction
  // (prescale_gradients, gradient_predivide_factor). y is f32 on every column, or f64 on the host
  // columns (cpu, ref); factor must be finite.
  Status Scale(Stream& stream, const Tensor& y, double factor);
  // ZeRO pack/unpack: the segments of `segments` from src into dst (same dtype, or f32 <-> bf16 /
  // f16 converting). Segments must not overlap each other's destination ranges or src. Ranges
  // outside src or dst are the stream's sticky error on the CPU backends; the CUDA launcher
  // cannot see the device array, so there they are the caller's responsibility.
  Status CopySegments(Stream& stream, const Tensor& src, const Tensor& dst,
                      const CopySegmentList& segments);
  // ZeRO's accumulation of a reduced piece into the gradient shard: dst[dst_offset + i] +=
  // src[src_offset + i] (i < count; zero_fill ignored) for each segment, f32 only, one fp32
  // rounding per element. Segments must not overlap each other's destination ranges.
  Status AccumulateSegments(Stream& stream, const Tensor& src, const Tensor& dst,
                            const CopySegmentList& segments);

 protected:
  explicit OpsBackend(Device& device) : device_(&device) {}

  // The backend's launchers, called after the arguments were checked against the contract
  // above (shapes consistent, dtypes as stated, compute dtype supported, tensors on this device),
  // so they only launch. Each names its op in the Status it returns.
  virtual Status DoLinearForward(Stream& stream, const LinearForwardArgs& args) = 0;
  virtual Status DoLinearBackward(Stream& stream, const LinearBackwardArgs& args) = 0;
  virtual Status DoEmbeddingForward(Stream& stream, const EmbeddingForwardArgs& args) = 0;
  virtual Status DoEmbeddingBackward(Stream& stream, const EmbeddingBackwardArgs& args) = 0;
  virtual Status DoPositionEmbeddingForward(Stream& stream,
                                            const PositionEmbeddingForwardArgs& args) = 0;
  virtual Status DoPositionEmbeddingBackward(Stream& stream,
                                             const PositionEmbeddingBackwardArgs& args) = 0;
  virtual Status DoAttentionForward(Stream& stream, const AttentionForwardArgs& args) = 0;
  virtual Status DoAttentionBackward(Stream& stream, const AttentionBackwardArgs& args) = 0;
  virtual Status DoCrossEntropyForward(Stream& stream, const CrossEntropyForwardArgs& args) = 0;
  virtual Status DoCrossEntropyBackward(Stream& stream, const CrossEntropyBackwardArgs& args) = 0;
  virtual Status DoCrossEntropyShardForward(Stream& stream,
                                            const CrossEntropyShardForwardArgs& args) = 0;
  virtual Status DoCrossEntropyShardLoss(Stream& stream, const CrossEntropyShardLossArgs& args) = 0;
  virtual Status DoLayerNormForward(Stream& stream, const LayerNormForwardArgs& args) = 0;
  virtual Status DoLayerNormBackward(Stream& stream, const LayerNormBackwardArgs& args) = 0;
  virtual Status DoRmsNormForward(Stream& stream, const RmsNormForwardArgs& args) = 0;
  virtual Status DoRmsNormBackward(Stream& stream, const RmsNormBackwardArgs& args) = 0;
  virtual Status DoGeluForward(Stream& stream, const GeluForwardArgs& args) = 0;
  virtual Status DoGeluBackward(Stream& stream, const GeluBackwardArgs& args) = 0;
  virtual Status DoSwiGluForward(Stream& stream, const SwiGluForwardArgs& args) = 0;
  virtual Status DoSwiGluBackward(Stream& stream, const SwiGluBackwardArgs& args) = 0;
  virtual Status DoRopeForward(Stream& stream, const RopeForwardArgs& args) = 0;
  virtual Status DoRopeBackward(Stream& stream, const RopeBackwardArgs& args) = 0;
  virtual Status DoAdd(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  virtual Status DoAccumulate(Stream& stream, const Tensor& x, const Tensor& y) = 0;
  virtual Status DoAdamStep(Stream& stream, const AdamStepArgs& args) = 0;
  virtual Status DoConvert(Stream& stream, const Tensor& src, const Tensor& dst) = 0;
  virtual Status DoSquaredSum(Stream& stream, const Tensor& x, const Tensor& out) = 0;
  virtual Status DoBlockSquaredSums(Stream& stream, const Tensor& x, const BlockSumList& list,
                                    const Tensor& out) = 0;
  virtual Status DoFlagInfOrNan(Stream& stream, const Tensor& x, int32_t* flag) = 0;
  virtual Status DoFill(Stream& stream, const Tensor& y, double value) = 0;
  virtual Status DoScale(Stream& stream, const Tensor& y, double factor) = 0;
  virtual Status DoCopySegments(Stream& stream, const Tensor& src, const Tensor& dst,
                                const CopySegmentList& segments) = 0;
  virtual Status DoAccumulateSegments(Stream& stream, const Tensor& src, const Tensor& dst,
                                      const CopySegmentList& segments) = 0;

  // "LinearForward: compute dtype bf16 (x is bf16[8, 32]) is not supported by the cpu ops
  // backend": for Do* functions that meet a dtype their backend lacks.
  Status UnsupportedDType(std::string_view op, std::string_view what, const Tensor& t) const;

 private:
  // The compute-dtype gate of the layer ops: Unimplemented unless Supports(t.dtype()).
  Status CheckCompute(std::string_view op, std::string_view name, const Tensor& t) const;

  Device* device_;
};

// True for the "not wanted" tensor: no data and no elements.
inline bool IsAbsent(const Tensor& t) { return t.raw_data() == nullptr && t.numel() == 0; }

}  // namespace sluice::ops
