#include "engine/model/model_options.h"

#include <algorithm>
#include <limits>
#include <string>

#include "engine/model/head_layout.h"

namespace sluice::model {

std::string_view FamilyName(Family family) { return family == Family::kGpt2 ? "gpt2" : "llama"; }

Status ValidateModelOptions(const ModelOptions& o) {
  const auto positive = [](std::string_view field, int64_t value) -> Status {
    if (value < 1) return InvalidArgumentError("model.{} = {} must be at least 1", field, value);
    return OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(positive("n_layer", o.n_layer));
  SLUICE_RETURN_IF_ERROR(positive("n_head", o.n_head));
  SLUICE_RETURN_IF_ERROR(positive("n_kv_head", o.n_kv_head));
  SLUICE_RETURN_IF_ERROR(positive("d_model", o.d_model));
  SLUICE_RETURN_IF_ERROR(positive("d_ff", o.d_ff));
  SLUICE_RETURN_IF_ERROR(positive("vocab_size", o.vocab_size));
  SLUICE_RETURN_IF_ERROR(positive("seq_len", o.seq_len));
  if (o.vocab_size > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("model.vocab_size = {} does not fit the int32 token ids",
                                o.vocab_size);
  }
  if (std::string error =
          HeadLayoutError(o.family == Family::kLlama, o.d_model, o.n_head, o.n_kv_head);
      !error.empty()) {
    return InvalidArgumentError("{}", error);
  }
  if (!(o.norm_eps > 0.0f)) {
    return InvalidArgumentError("model norm_eps = {} must be positive", o.norm_eps);
  }
  if (!(o.rope_theta > 0.0)) {
    return InvalidArgumentError("model rope_theta = {} must be positive", o.rope_theta);
  }
  if (!(o.init_std >= 0.0)) {
    return InvalidArgumentError("model.init_std = {} must be non-negative", o.init_std);
  }
  if (o.param_dtype != DType::kF32 && o.param_dtype != DType::kBF16) {
    return InvalidArgumentError("model.dtype = {} is not supported for parameters; use f32 or bf16",
                                DTypeName(o.param_dtype));
  }
  if (o.checkpointing.blocks < 0) {
    return InvalidArgumentError(
        "activation_checkpointing.number_checkpoints = {} must be at least 1 (unset: every block)",
        o.checkpointing.blocks);
  }
  if (o.tensor_parallel_size < 1 || o.tensor_parallel_rank < 0 ||
      o.tensor_parallel_rank >= o.tensor_parallel_size) {
    return InvalidArgumentError(
        "tensor-parallel rank {} of size {} does not exist; the size is at least 1 and the rank "
        "in [0, size)",
        o.tensor_parallel_rank, o.tensor_parallel_size);
  }
  if (o.sequence_parallel && o.tensor_parallel_size < 2) {
    return InvalidArgumentError(
        "tensor_parallel.sequence_parallel needs tensor_parallel.autotp_size above 1 (it splits "
        "the tokens over the tensor-parallel ranks), and the tensor-parallel size is {}; raise "
        "autotp_size or turn sequence_parallel off",
        o.tensor_parallel_size);
  }
  if (std::string error = TensorSplitError(o.n_head, o.n_kv_head, o.d_ff, o.tensor_parallel_size);
      !error.empty()) {
    return InvalidArgumentError("{}", error);
  }
  if (o.num_threads < 0) {
    return InvalidArgumentError("model num_threads = {} must be 0 (automatic) or positive",
                                o.num_threads);
  }
  return OkStatus();
}

int64_t CheckpointedBlocks(const ModelOptions& o) {
  if (!o.activation_checkpointing) return 0;
  const int64_t blocks = o.checkpointing.blocks;
  return blocks <= 0 ? o.n_layer : std::min(blocks, o.n_layer);
}

int64_t CountParameters(const ModelOptions& o) {
  const int64_t d = o.d_model;
  const int64_t ff = o.d_ff;
  const int64_t embeddings = o.vocab_size * d;
  const int64_t head = o.tie_embeddings ? 0 : o.vocab_size * d;
  if (o.family == Family::kGpt2) {
    const int64_t block = 2 * d                // ln_1
                          + 3 * d * d + 3 * d  // attn.c_attn
                          + d * d + d          // attn.c_proj
                          + 2 * d              // ln_2
                          + d * ff + ff        // mlp.c_fc
                          + ff * d + d;        // mlp.c_proj
    return embeddings + o.seq_len * d + o.n_layer * block + 2 * d + head;
  }
  const int64_t head_dim = d / o.n_head;
  const int64_t q = o.n_head * head_dim;
  const int64_t kv = o.n_kv_head * head_dim;
  const int64_t block = d                     // input_layernorm
                        + q * d + 2 * kv * d  // q_proj, k_proj, v_proj
                        + d * q               // o_proj
                        + d                   // post_attention_layernorm
                        + 3 * ff * d;         // gate_proj, up_proj, down_proj
  return embeddings + o.n_layer * block + d + head;
}

}  // namespace sluice::model
