// What model to build: a plain struct the engine fills from the config's `model` section.
// The family fixes the architecture:
//   gpt2:  LayerNorm (weight and bias), GELU MLP (c_fc, c_proj), learned positions (wpe), biases
//          on every linear, fused q/k/v projection (c_attn), multi-head attention.
//   llama: RMSNorm (weight only), SwiGLU MLP (gate_proj, up_proj, down_proj), RoPE, no biases,
//          separate q/k/v projections, grouped-query attention (n_kv_head <= n_head).
// tie_embeddings (LM head shares the token table) is independent of the family.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::model {

enum class Family : uint8_t { kGpt2 = 0, kLlama };
std::string_view FamilyName(Family family);  // "gpt2", "llama"

// How checkpointed blocks keep their input (DeepSpeed's activation_checkpointing section; the
// engine fills it from the config, docs/config.md). Used only with activation_checkpointing.
struct CheckpointingOptions {
  // Blocks checkpointed: the first `blocks` of the forward (number_checkpoints); 0 = every block.
  // The first ones, because the backward reaches them last: the full activations of the later
  // blocks are freed before any recomputation needs room.
  int64_t blocks{};
  // The kept inputs live in pinned host memory (cpu_checkpointing): a stream-ordered copy to the
  // host in the forward, back to the device before the recomputation.
  bool host{};
  // The kept inputs are copied into one buffer with a slot per checkpointed block instead of one
  // allocation each (contiguous_memory_optimization; checkpointed_inputs.h).
  bool contiguous{};
  // Synchronize the compute stream at the start of each checkpointed block's forward and
  // backward (synchronize_checkpoint_boundary).
  bool synchronize{};
  // Time each block's recomputation in the backward: a trace span and a log line per pass
  // (profile).
  bool profile{};
};

// The fields hold no defaults: each is a setting (model.*, activation_checkpointing.*,
// device.threads, tensor_parallel.*) whose default the settings registry declares.
// Built from a config by train::ModelOptionsFromConfig, from the registry's defaults by
// train::DefaultModelOptions; made on its own it is blank (and ValidateModelOptions refuses it).
struct ModelOptions {
  Family family{};
  int64_t n_layer{};
  int64_t n_head{};
  int64_t n_kv_head{};  // gpt2: must equal n_head
  int64_t d_model{};    // a multiple of n_head; head_dim = d_model / n_head (even for llama)
  int64_t d_ff{};       // MLP hidden width
  int64_t vocab_size{};
  int64_t seq_len{};  // longest sequence (gpt2: rows of wpe); batches may be shorter
  bool tie_embeddings{};
  double rope_theta{};  // llama
  float norm_eps{};     // LayerNorm / RMSNorm epsilon
  double init_std{};    // std of the normal init (see init.h)
  // Blocks keep only their input during the forward and recompute the rest in the backward.
  bool activation_checkpointing{};
  CheckpointingOptions checkpointing;
  // Storage dtype of the parameters (kF32 or kBF16). Compute and gradients are always fp32 (see
  // model.h). Only Model<float> accepts kBF16.
  DType param_dtype{};
  // Threads for the CPU ops; 0 = OpenMP's default.
  int num_threads{};
  // Megatron tensor parallelism (engine/parallel/tensor_plan.h): this rank builds piece
  // tensor_parallel_rank of tensor_parallel_size of every decoder block (its share of the heads
  // and of d_ff) and all-reduces over the tensor communicator passed to Model::Create. Size 1:
  // the whole model, no communication. The rank is the process grid's, not a setting.
  int64_t tensor_parallel_size{};
  int64_t tensor_parallel_rank{};
  // Megatron sequence parallelism (tensor_parallel.sequence_parallel; tensor_plan.h): between
  // the tensor-parallel regions each tensor rank holds only its slice of the rows (tokens), and
  // all-gathers and reduce-scatters replace the all-reduces. Needs tensor_parallel_size > 1, and
  // each micro-batch's token count (batch x seq) must divide by it: the pass refuses one that
  // does not (InvalidArgument).
  bool sequence_parallel{};
};

// OK, or InvalidArgument naming the offending field ("model.n_kv_head = 3 does not divide
// model.n_head = 4") and what to change.
Status ValidateModelOptions(const ModelOptions& options);

// Decoder blocks checkpointed: 0 without activation_checkpointing, else checkpointing.blocks
// capped at n_layer (0: n_layer). They are blocks 0 .. CheckpointedBlocks() - 1.
int64_t CheckpointedBlocks(const ModelOptions& options);

// Parameters of the model `options` describes, counting a tied LM head once; no allocation. The
// whole model's, whatever tensor_parallel_size.
// GPT-2 124M (n_layer 12, n_head 12, d_model 768, d_ff 3072, vocab 50257, seq_len 1024, tied)
// gives 124,439,808.
int64_t CountParameters(const ModelOptions& options);

}  // namespace sluice::model
