// The rules a decoder's attention heads and their split over tensor-parallel ranks follow,
// written once: ValidateModelOptions applies them to a ModelOptions, the config
// (config_resolve.cpp) to the model section as it loads, naming where each value was set.
// Header-only, as the config library links no model code.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace sluice::model {

// Empty when the heads fit d_model; else the first rule broken, naming the model.* keys. n_head
// and n_kv_head are at least 1.
inline std::string HeadLayoutError(bool llama, int64_t d_model, int64_t n_head, int64_t n_kv_head) {
  if (d_model % n_head != 0) {
    return fmt::format(
        "model.d_model = {} is not a multiple of model.n_head = {}; the head dimension is "
        "d_model / n_head",
        d_model, n_head);
  }
  if (n_head % n_kv_head != 0) {
    return fmt::format(
        "model.n_kv_head = {} does not divide model.n_head = {}; grouped-query attention shares "
        "each key/value head among n_head / n_kv_head query heads",
        n_kv_head, n_head);
  }
  if (!llama && n_kv_head != n_head) {
    return fmt::format(
        "model.n_kv_head = {} differs from model.n_head = {}, but gpt2 uses multi-head "
        "attention; set them equal or use family llama for grouped-query attention",
        n_kv_head, n_head);
  }
  if (llama && (d_model / n_head) % 2 != 0) {
    return fmt::format(
        "model.d_model / model.n_head = {} is odd; rotary embeddings pair dimensions, so llama "
        "needs an even head dimension",
        d_model / n_head);
  }
  return "";
}

// Empty when the heads and the MLP split over `tensor` tensor-parallel ranks (tensor_plan.h);
// else the first rule broken, naming the keys.
inline std::string TensorSplitError(int64_t n_head, int64_t n_kv_head, int64_t d_ff,
                                    int64_t tensor) {
  if (tensor <= 1) return "";
  if (n_head % tensor != 0) {
    return fmt::format(
        "model.n_head = {} does not split over tensor_parallel.autotp_size = {}; each tensor "
        "rank takes n_head / size whole heads",
        n_head, tensor);
  }
  // Fewer key/value heads than ranks: each is replicated on tensor / n_kv_head consecutive ranks
  // (Megatron's and vLLM's scheme; tensor_layout.h), which needs whole groups of ranks per head.
  if (n_kv_head % tensor != 0 && tensor % n_kv_head != 0) {
    return fmt::format(
        "model.n_kv_head = {} does not split over tensor_parallel.autotp_size = {}: key/value "
        "heads are split over the tensor ranks when there are at least as many as ranks "
        "(n_kv_head a multiple of the size) and replicated over groups of ranks when there are "
        "fewer (the size a multiple of n_kv_head); use a size that divides n_kv_head or that "
        "n_kv_head divides",
        n_kv_head, tensor);
  }
  if (d_ff % tensor != 0) {
    return fmt::format(
        "model.d_ff = {} does not split over tensor_parallel.autotp_size = {}; each tensor rank "
        "takes d_ff / size columns of the MLP",
        d_ff, tensor);
  }
  return "";
}

// The key/value heads a tensor rank holds when TensorSplitError accepts the split: its share
// n_kv_head / tensor of them, or one replicated head when there are fewer heads than ranks.
inline int64_t KvHeadsPerTensorRank(int64_t n_kv_head, int64_t tensor) {
  return tensor <= 1 ? n_kv_head : n_kv_head >= tensor ? n_kv_head / tensor : 1;
}

}  // namespace sluice::model
