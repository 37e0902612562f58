#include "engine/estimate/activation_estimate.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/estimate/count_format.h"
#include "engine/estimate/model_layout.h"
#include "kernels/ref/ops_attention.h"

namespace sluice::estimate {
namespace {

constexpr int64_t kF32 = 4;  // bytes of the compute dtype

}  // namespace

ActivationEstimate EstimateActivations(const model::ModelOptions& o, int64_t micro_batch,
                                       int64_t seq) {
  const bool gpt2 = o.family == model::Family::kGpt2;
  const int64_t r = micro_batch * seq;  // rows: one per token
  const int64_t d = o.d_model;
  const int64_t f = o.d_ff;
  const int64_t h = o.n_head;
  const int64_t kv = o.n_kv_head * (d / o.n_head);
  const int64_t v = o.vocab_size;
  const int64_t workspace =
      kernels::AttentionWorkspaceElements({micro_batch, seq, o.n_head, o.n_kv_head, d / o.n_head});

  // Saved elements (see the modules' Forward): norms keep y and their statistics; linears their
  // output; attention q, k, v, its output and the log-sum-exp per head; the block its two
  // residual sums; the MLP its activation output.
  const int64_t embeddings = gpt2 ? 2 * r * d : r * d;
  const int64_t norm = gpt2 ? r * d + 2 * r : r * d + r;
  const int64_t block = gpt2 ? 2 * norm + 2 * r * (d + 2 * kv)  // c_attn out, then q, k, v
                                   + r * d + r * h + r * d      // attention out, lse, c_proj
                                   + 2 * r * d                  // residual sums h, y
                                   + 2 * r * f + r * d          // c_fc out, gelu, c_proj
                             : 2 * norm + r * d + 2 * r * kv    // q, k, v projections
                                   + r * d + r * kv             // rotated q, k
                                   + r * d + r * h + r * d      // attention out, lse, o_proj
                                   + 2 * r * d                  // residual sums h, y
                                   + 3 * r * f + r * d;         // gate, up, swiglu, down
  const int64_t head = norm + r * v;  // final norm, logits (the loss adds r for its lse)

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
                       : host       ? r * d
                       : contiguous ? (ckpt + 1) * r * d
                                    : ckpt * r * d;
  const int64_t restored = host ? r * d : 0;
  // The backward's peak, on top of everything kept and the LM head's input gradient R*d: the
  // head's activations, or the last full block's first backward step (its MLP output gradient,
  // R x d_ff), or, once the full blocks are done, the last checkpointed block recomputing
  // everything it saves (after its input came back from the host) before that same step.
  const int64_t at_head = kept + full * block + std::max(head, full > 0 ? r * f : 0);
  const int64_t at_recompute = ckpt > 0 ? kept + restored + block + r * f : 0;
  const int64_t peak = embeddings + r * d + std::max(at_head, at_recompute);
  const int64_t host_kept = host ? ckpt * r * d : 0;

  // Scratch: the attention workspace, which the ops backend keeps for the compute stream once the
  // first attention ran (runtime/ops/ops_backend.h), and on top of it, per block backward, GELU's
  // or SwiGLU's input gradients, then the block's residual gradient with dq, dk, dv and, fused,
  // the dqkv they are merged into.
  const int64_t mlp_scratch = gpt2 ? r * f : 2 * r * f;
  const int64_t attention_scratch =
      gpt2 ? 2 * r * d + 2 * r * kv + r * (d + 2 * kv) : 2 * r * d + 2 * r * kv;
  const int64_t block_scratch = std::max(mlp_scratch, attention_scratch);
  int64_t scratch = workspace + block_scratch;
  std::string widening;
  if (o.param_dtype == DType::kBF16) {
    // The running unit's parameters, widened to fp32 for the whole of its forward or backward.
    int64_t widened = 0;
    for (const UnitLayout& unit : DescribeUnits(o)) {
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
  e.block_kept_bytes = (ckpt > 0 ? r * d : block) * kF32;
  e.head_saved_bytes = head * kF32;
  e.peak_bytes = peak * kF32;
  e.host_kept_bytes = host_kept * kF32;
  e.scratch_peak_bytes = scratch * kF32;
  if (ckpt == 0) {
    e.peak_formula = fmt::format(
        "4 B x (embeddings {} + n_layer {} x per-block {} + head grad R*d {} + max(norm+logits "
        "{}, R*d_ff {})), R = {} tokens",
        FormatCount(embeddings), o.n_layer, FormatCount(block), FormatCount(r * d),
        FormatCount(head), FormatCount(r * f), FormatCount(r));
  } else {
    const std::string kept_text =
        host ? fmt::format("last output R*d {} (inputs in host memory)", FormatCount(r * d))
        : contiguous
            ? fmt::format("contiguous inputs {} x R*d + last output = {}", ckpt, FormatCount(kept))
            : fmt::format("{} x output R*d = {}", ckpt, FormatCount(kept));
    e.peak_formula = fmt::format(
        "4 B x (embeddings {} + head grad R*d {} + max(kept {} + {} full blocks x {} + "
        "max(norm+logits {}, R*d_ff {}), kept{} + recomputed block {} + R*d_ff {})), {} of {} "
        "blocks checkpointed, R = {} tokens",
        FormatCount(embeddings), FormatCount(r * d), kept_text, full, FormatCount(block),
        FormatCount(head), FormatCount(full > 0 ? r * f : 0),
        host ? fmt::format(" + input copied back {}", FormatCount(restored)) : "",
        FormatCount(block), FormatCount(r * f), ckpt, o.n_layer, FormatCount(r));
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
