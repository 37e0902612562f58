// Model FLOPs of training, and what they come to against the device's peak (MFU).
//
// FLOPs per trained token are counted as Megatron-LM (Narayanan et al. 2021, "Efficient
// Large-Scale Language Model Training on GPU Clusters", section 5.1, without the recomputation
// term) and PaLM (Chowdhery et al. 2022, appendix B) count them:
//
//   flops_per_token = 6 N + 12 L d_attn T
//
//   N       the weights of the matrix multiplies: every block's projections (GPT-2: c_attn,
//           c_proj, c_fc, mlp c_proj; Llama: q, k, v, o, gate, up, down, so grouped-query k and
//           v count at their real width) and the LM head (d_model x vocab, counted even when tied
//           to the token embedding, whose lookup costs no FLOPs). Embedding lookups, position
//           tables, norms and biases are left out: they are not matrix multiplies.
//   6       2 FLOPs per weight and token in the forward, 4 in the backward (input and weight
//           gradients).
//   12 L d_attn T   the attention scores and their weighted sum (2 matrix products of 2 d_attn T
//           FLOPs a token in the forward, twice that in the backward) over L layers, d_attn =
//           n_head x head_dim, T = the training sequence length. Like both papers this counts the
//           whole T x T score matrix, not the causal half.
//
// These are model FLOPs: recomputation (activation checkpointing) does not add to them, so MFU
// says how much of the device's peak went into the model's own arithmetic.
#pragma once

#include <cstdint>

#include "engine/model/model_options.h"

namespace sluice::train {

struct ModelFlops {
  int64_t matmul_parameters = 0;    // N
  int64_t attention_per_token = 0;  // 12 L d_attn T
  int64_t per_token = 0;            // 6 N + 12 L d_attn T
};

// For sequences of `seq_len` tokens (the training window; model.seq_len when it is the same).
ModelFlops CountModelFlops(const model::ModelOptions& options, int64_t seq_len);

// The formula above in one line, for summaries and docs.
inline constexpr const char* kModelFlopsFormula =
    "6N + 12 L d_attn T per token (Megatron-LM / PaLM model FLOPs; N = matmul weights incl. the "
    "LM head)";

}  // namespace sluice::train
