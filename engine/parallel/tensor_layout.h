// Where every parameter of a model lies over the tensor-parallel ranks, from the model's options
// alone: no communicator, no model. The rules of Megatron's split (tensor_plan.h's header:
// column-parallel projections split along dim 0, GPT-2's fused q/k/v per block, row-parallel
// weights along dim 1 with their biases replicated, the token table and LM head along the
// vocabulary in balanced pieces, everything else replicated, the norms' gradients partial under
// sequence parallelism; Llama's key/value heads shared by groups of ranks when there are fewer of
// them than ranks) as one pure function: TensorParallelPlan::ShardingOf answers with it for a
// model it builds, and the memory estimator (engine/estimate) counts a tensor rank's pieces with
// it before anything is built.
//
//   const TensorLayout layout = TensorLayoutOf(options);  // options.tensor_parallel_size, _rank
//   TensorSharding s = *TensorShardingOf(layout, "transformer.h.0.mlp.c_fc.weight", {f, d});
//   s.LocalShape();  // {f / size, d}
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/model/model_options.h"
#include "engine/parallel/tensor_sharding.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace sluice::parallel {

struct TensorLayout {
  int64_t size = 1;  // tensor ranks; 1: every parameter whole
  int64_t rank = 0;  // this one
  // The token table and LM head split along the vocabulary (an ops backend with kernels for a
  // piece of it: OpsBackend::SupportsVocabShards); else replicated like the norms.
  bool vocab_parallel = true;
  bool sequence_parallel = false;  // the norms' gradients are partial sums
  int64_t q_rows = 0;              // GPT-2's fused c_attn: its q block's rows (d_model)
  int64_t kv_rows = 0;             // and its k and v blocks' (n_kv_head x head_dim)
  // Llama's k_proj and v_proj split into n_kv_head pieces of one head when there are fewer heads
  // than ranks, each shared by size / n_kv_head consecutive ranks; 0: split like any column.
  int64_t kv_pieces = 0;
};

// The layout of tensor rank options.tensor_parallel_rank of options.tensor_parallel_size.
TensorLayout TensorLayoutOf(const model::ModelOptions& options, bool vocab_parallel = true);

// The layout of the parameter named `name` (its Hugging Face name, as the registry has it) of
// global shape `global`: WholeTensor at size 1. InvalidArgument naming the parameter when a split
// does not divide (ValidateModelOptions refuses those options) or a vocabulary piece would be
// empty (fewer ids than ranks).
Result<TensorSharding> TensorShardingOf(const TensorLayout& layout, std::string_view name,
                                        const Shape& global);

// The Linear named `module` is row-parallel (split along its input; its bias replicated and
// added by tensor rank 0 alone).
bool IsRowParallel(std::string_view module);
// The parameter named `name` is a table split along the vocabulary (token table, LM head).
bool IsVocabTable(std::string_view name);

}  // namespace sluice::parallel
