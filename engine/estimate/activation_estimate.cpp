#include "engine/estimate/activation_estimate.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/estimate/count_format.h"
#include "engine/estimate/model_layout.h"
#include "engine/model/head_layout.h"
#include "kernels/ref/ops_attention.h"

namespace sluice::estimate {
namespace {}  // namespace

ActivationEstimate EstimateActivations(const model::ModelOptions& o, int64_t micro_batch,
                                       int64_t seq, bool vocab_parallel) {
  const bool gpt2 = o.family == model::Family::kGpt2;
  const int64_t r = micro_batch * seq;  // rows: one per token
  const int64_t d = o.d_model;
  const int64_t h = o.n_head;
  // Tensor parallelism (tensor_plan.h): inside the attention and MLP regions a rank holds its
  // heads and its d_ff columns, so their activations are 1/t; what leaves a region (the
  // row-parallel projection's [R, d] partial sums), the norms and the residual stream stay whole,
  // or, with sequence parallelism, the norms and residual stream hold this rank's R/t rows. The
  // logits are this rank's piece of the vocabulary (rank 0's, the longest), the head's input
  // gathered whole with sequence parallelism.
  const int64_t t = std::max<int64_t>(1, o.tensor_parallel_size);
  const bool sp = o.sequence_parallel && t > 1;
  const int64_t rs = sp ? r / t : r;  // rows of the norms and the residual stream
  const int64_t f = o.d_ff / t;       // this rank's MLP columns
  const int64_t hl = h / t;           // heads
  // Key/value heads: this rank's share, or one replicated head when there are fewer than ranks.
  const int64_t kv_heads = model::KvHeadsPerTensorRank(o.n_kv_head, t);
  const int64_t kvl = kv_heads * (d / h);  // key/value width
  const int64_t dl = d / t;                // query width
  const int64_t v = t > 1 && vocab_parallel ? (o.vocab_size + t - 1) / t : o.vocab_size;
  const int64_t workspace =
      kernels::AttentionWorkspaceElements({micro_batch, seq, o.n_head / t, kv_heads, d / o.n_head});

  // Saved elements (see the modules' Forward): norms keep y and their statistics; linears their
  // output; attention q, k, v, its output and the log-sum-exp per head; the block its two
  // residual sums; the MLP its activation output.
  const int64_t embeddings = gpt2 ? 2 * r * d : r * d;
  const int64_t norm = gpt2 ? rs * d + 2 * rs : rs * d + rs;
  const int64_t block = gpt2 ? 2 * norm + 2 * r * (dl + 2 * kvl)  // c_attn out, then q, k, v
                                   + r * dl + r * hl + r * d      // attention out, lse, c_proj
                                   + 2 * rs * d                   // residual sums h, y
                                   + 2 * r * f + r * d            // c_fc out, gelu, c_proj
                             : 2 * norm + r * dl + 2 * r * kvl    // q, k, v projections
                                   + r * dl + r * kvl             // rotated q, k
                                   + r * dl + r * hl + r * d      // attention out, lse, o_proj
                                   + 2 * rs * d                   // residual sums h, y
                                   + 3 * r * f + r * d;           // gate, up, swiglu, down
  // Final norm, the head's gathered input (sequence parallelism), logits (the loss adds r for its
  // lse).
  const int64_t head = norm + (sp ? r * d : 0) + r * v;

  // Checkpointing (checkpointed_inputs.h): the first `ckpt` blocks keep only their input. With
  // the inputs as views (the default) each checkpointed block's output copy stays on the device
  // as the next block's input; with copies, the device holds only the last checkpointed block's
  // output (the others are handed off), plus the contiguous buffer of every input on the device
  // or, with cpu_checkpointing, nothing more (the inputs are in pinned host memory, copied back
  // one at a time for the recomputation).
  const int64_t ckpt = model::CheckpointedBlocks(o);
  const bool host = ckpt > 0 && o.checkpointing.host;
  const bool contiguous = ckpt > 0 && o.checkpointing.contiguous;
  const int64_t full = o.n_layer - ckpt;  // blocks that keep everything
  const int64_t kept = ckpt == 0    ? 0
                       : host       ? rs * d
                       : contiguous ? (ckpt + 1) * rs * d
                                    : ckpt * rs * d;
  const int64_t restored = host ? rs * d : 0;
  // The backward's peak, on top of everything kept and the LM head's input gradient R*d: the
  // head's activations, or the last full block's first backward step (its MLP output gradient,
  // R x d_ff), or, once the full blocks are done, the last checkpointed block recomputing
  // everything it saves (after its input came back from the host) before that same step. With
  // sequence parallelism that step also holds the region's gathered output gradient and its
  // re-gathered input (R*d each) beside the residual gradient's R/t rows, in place of the head's
  // input gradient.
  const int64_t step = r * f + (sp ? rs * d + r * d : 0);
  const int64_t at_head = kept + full * block + std::max(head, full > 0 ? step : 0);
  const int64_t at_recompute = ckpt > 0 ? kept + restored + block + step : 0;
  const int64_t peak = embeddings + r * d + std::max(at_head, at_recompute);
  const int64_t host_kept = host ? ckpt * rs * d : 0;

  // Scratch: the attention workspace, which the ops backend keeps for the compute stream once the
  // first attention ran (runtime/ops/ops_backend.h), and on top of it, per block backward, GELU's
  // or SwiGLU's input gradients, then the block's residual gradient with dq, dk, dv and, fused,
  // the dqkv they are merged into.
  const int64_t mlp_scratch = gpt2 ? r * f : 2 * r * f;
  const int64_t attention_scratch = rs * d + r * dl + 2 * r * kvl + (gpt2 ? r * (dl + 2 * kvl) : 0);
  const int64_t block_scratch = std::max(mlp_scratch, attention_scratch);
  int64_t scratch = workspace + block_scratch;
  std::string widening;
  if (o.param_dtype == DType::kBF16) {
    // The running unit's parameters, widened to fp32 for the whole of its forward or backward.
    int64_t widened = 0;
    for (const UnitLayout& unit : DescribeUnits(o, vocab_parallel)) {
      const int64_t extra = unit.name == "block" ? block_scratch : 0;
      widened = std::max(widened, unit.read_elements + extra);
    }
    scratch = workspace + widened;
    widening = " incl. bf16->fp32 widening of the running unit";
  }

  ActivationEstimate e;
  e.tokens = r;
  e.embeddings_saved_bytes = embeddings * kF32;
  e.block_saved_bytes = block * kF32;
  e.checkpointed_blocks = ckpt;
  e.block_kept_bytes = (ckpt > 0 ? rs * d : block) * kF32;
  e.head_saved_bytes = head * kF32;
  e.row_bytes = r * d * kF32;
  e.kept_row_bytes = rs * d * kF32;
  e.mlp_grad_bytes = step * kF32;
  e.peak_bytes = peak * kF32;
  e.host_kept_bytes = host_kept * kF32;
  e.scratch_peak_bytes = scratch * kF32;
  const std::string step_text = t == 1 ? "R*d_ff"
                                : sp
                                    ? fmt::format("R*d_ff/{} + 2 R*d gathered + R*d/{} - R*d", t, t)
                                    : fmt::format("R*d_ff/{}", t);
  const std::string tensor_text =
      t == 1 ? ""
             : fmt::format("; tensor rank 0 of {}{}: heads, d_ff{} 1/{}{}", t,
                           sp ? " with sequence parallelism" : "",
                           vocab_parallel ? " and vocabulary" : "", t,
                           sp ? fmt::format(", norms and residual stream R/{} rows", t) : "");
  if (ckpt == 0) {
    e.peak_formula = fmt::format(
        "4 B x (embeddings {} + n_layer {} x per-block {} + head grad R*d {} + max(norm+logits "
        "{}, {} {})), R = {} tokens{}",
        FormatCount(embeddings), o.n_layer, FormatCount(block), FormatCount(r * d),
        FormatCount(head), step_text, FormatCount(step), FormatCount(r), tensor_text);
  } else {
    const std::string kept_text =
        host ? fmt::format("last output R*d {} (inputs in host memory)", FormatCount(rs * d))
        : contiguous
            ? fmt::format("contiguous inputs {} x R*d + last output = {}", ckpt, FormatCount(kept))
            : fmt::format("{} x output R*d = {}", ckpt, FormatCount(kept));
    e.peak_formula = fmt::format(
        "4 B x (embeddings {} + head grad R*d {} + max(kept {} + {} full blocks x {} + "
        "max(norm+logits {}, {} {}), kept{} + recomputed block {} + {} {})), {} of {} "
        "blocks checkpointed, R = {} tokens{}",
        FormatCount(embeddings), FormatCount(r * d), kept_text, full, FormatCount(block),
        FormatCount(head), step_text, FormatCount(full > 0 ? step : 0),
        host ? fmt::format(" + input copied back {}", FormatCount(restored)) : "",
        FormatCount(block), step_text, FormatCount(step), ckpt, o.n_layer, FormatCount(r),
        tensor_text);
  }
  e.host_formula =
      host ? fmt::format("4 B x {} checkpointed blocks x R*d {} (pinned{})", ckpt,
                         FormatCount(r * d), contiguous ? ", one contiguous buffer" : "")
           : "";
  e.scratch_formula = fmt::format("4 B x (attention workspace {} + max(MLP {}, attention {}){})",
                                  FormatCount(workspace), FormatCount(mlp_scratch),
                                  FormatCount(attention_scratch), widening);
  return e;
}

}  // namespace sluice::estimate
