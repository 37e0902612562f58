// Megatron tensor parallelism applied to a model as it is built (after torchtitan's
// `parallelize`): the layer code builds whatever its registry and wrappers give it, and this plan
// decides both.
//
// What each tensor rank holds (ShardingOf, the registry's sharding rule), by Hugging Face name:
//   column-parallel, split along the output (weight dim 0, bias too): attn.c_attn (GPT-2's fused
//     q/k/v rows split per q, k and v, so a rank holds its own heads of each), self_attn.q_proj,
//     k_proj, v_proj, mlp.c_fc, mlp.gate_proj, mlp.up_proj;
//   row-parallel, split along the input (weight dim 1): attn.c_proj, self_attn.o_proj,
//     mlp.c_proj, mlp.down_proj; their bias is replicated, and only tensor rank 0 adds it to its
//     partial sum (the others leave it out, Linear::OmitBiasInForward), so the sum adds it once
//     and every rank computes the same bias gradient;
//   everything else replicated: embeddings, position table, norms, LM head.
// Heads split over the ranks: n_head and n_kv_head must both divide by the size (grouped-query
// attention with fewer key/value heads than ranks is refused by ValidateModelOptions), and d_ff.
//
// What runs (Parallelize): each decoder block's attention and MLP are wrapped in a
// TensorParallelRegion, f before and g after (tensor_region.h): per block and pass two
// all-reduces in the forward (g) and two in the backward (f), each of [rows, d_model].
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/model/decoder_block.h"
#include "engine/model/model_options.h"
#include "engine/model/module.h"
#include "engine/parallel/tensor_comm.h"
#include "engine/parallel/tensor_sharding.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::parallel {

class TensorParallelPlan {
 public:
  // For options.tensor_parallel_size > 1 (ValidateModelOptions'd). Collective over `tensor`,
  // which must have tensor_parallel_size ranks, this one being tensor_parallel_rank (else
  // InvalidArgument naming both); the plan keeps its own copy of it (tensor_comm.h), its comm
  // stream on `device`.
  static Result<std::unique_ptr<TensorParallelPlan>> Create(const model::ModelOptions& options,
                                                            Comm& tensor, Device& device);

  int64_t size() const { return size_; }
  int64_t rank() const { return rank_; }
  TensorComm& comm() const { return *comm_; }

  // The layout over the tensor ranks of parameter `name` of global shape `global`.
  TensorSharding ShardingOf(std::string_view name, const Shape& global) const;

  // Wraps the block's attention and MLP in their tensor-parallel regions and leaves the
  // row-parallel biases to tensor rank 0. Build time, once per block, with the model's builder.
  template <typename T>
  void Parallelize(model::DecoderBlock<T>& block, model::ModuleBuilder& builder) const;

 private:
  TensorParallelPlan(const model::ModelOptions& options, std::unique_ptr<TensorComm> comm);

  int64_t size_;
  int64_t rank_;
  int64_t q_rows_;  // the fused c_attn's q, k and v blocks
  int64_t kv_rows_;
  std::unique_ptr<TensorComm> comm_;
};

}  // namespace sluice::parallel
