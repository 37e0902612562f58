// Device memory the model's forward/backward takes for one micro-batch, derived from what each
// layer of engine/model allocates (all fp32: the CPU ops compute in fp32 whatever the storage
// dtype):
//   - activations (category activations): what modules save for their backward plus the input
//     gradients a backward returns, at the peak of the pass;
//   - scratch (category buffers): per-call temporaries (attention workspace, backward
//     temporaries) plus, with bf16 storage, the fp32 widening of the unit that is running.
// The two peaks happen at different moments; each is the peak of its own category, which is what
// the memory ledger reports. With cpu_checkpointing the checkpointed inputs are in pinned host
// memory (host_kept_bytes). docs/memory_estimator.md derives the formulas.
#pragma once

#include <cstdint>
#include <string>

#include "engine/model/model_options.h"

namespace sluice::estimate {

// Bytes of an element of the compute dtype (fp32 activations, gradients and master copies).
inline constexpr int64_t kF32 = 4;

struct ActivationEstimate {
  int64_t tokens = 0;                  // R = micro_batch * seq
  int64_t embeddings_saved_bytes = 0;  // E
  int64_t block_saved_bytes = 0;       // one decoder block without checkpointing
  int64_t checkpointed_blocks = 0;     // model::CheckpointedBlocks: the first ones
  int64_t block_kept_bytes = 0;        // what a block keeps to its backward (= block_saved_bytes,
                                       // or its input alone with checkpointing: R*d)
  int64_t head_saved_bytes = 0;        // final norm + logits
  int64_t row_bytes = 0;               // one [R, d_model] hidden state (a gradient, an input)
  int64_t kept_row_bytes = 0;          // a checkpointed block's input: R x d, or R/t x d with
                                       // sequence parallelism
  int64_t mlp_grad_bytes = 0;          // an MLP output gradient: R x d_ff (this rank's d_ff/t)
  int64_t peak_bytes = 0;              // device, category activations
  // cpu_checkpointing: the checkpointed blocks' inputs in pinned host memory (category
  // activations), held from the first pass on; 0 otherwise.
  int64_t host_kept_bytes = 0;
  int64_t scratch_peak_bytes = 0;  // category buffers (scratch + bf16 widening)
  std::string peak_formula;        // the terms of peak_bytes, with numbers
  std::string host_formula;        // of host_kept_bytes ("" when 0)
  std::string scratch_formula;
};

// `options.activation_checkpointing` with `options.checkpointing` (which blocks, host or device,
// contiguous) and `options.param_dtype` are honoured; `seq` <= seq_len. With
// options.tensor_parallel_size t > 1, tensor rank 0's (tensor_plan.h): the attention heads' and
// the MLP's activations are 1/t, the logits 1/t of the vocabulary (`vocab_parallel`, as the ops
// backend allows); with options.sequence_parallel the norms and the residual stream hold R/t rows.
ActivationEstimate EstimateActivations(const model::ModelOptions& options, int64_t micro_batch,
                                       int64_t seq, bool vocab_parallel = true);

}  // namespace sluice::estimate
