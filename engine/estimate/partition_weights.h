// The per-layer weights parallel::PartitionLayers balances for each pipeline.partition_method,
// shared by the trainer's stage builder and the memory estimator so that `sluice estimate` plans
// the stages training builds.
//
// A decoder model's layer list, in DeepSpeed's terms (a PipelineModule's layers): Embeddings,
// DecoderBlock x n_layer, LayerNorm (GPT-2) or RmsNorm (Llama), LMHead. Sluice partitions the
// decoder layers: layer 0 carries the embeddings, layer n_layer - 1 the final norm and the head.
//   parameters: the parameters each layer carries (LayerParameterWeights).
//   type:<regex>: how many of the classes a layer carries the regex matches (DeepSpeed's binary
//     weights): "type:DecoderBlock" balances the blocks alone; InvalidArgument when it matches
//     none of them.
//   time: the compute time each layer carries, forward and backward: the times measured on the
//     device when training starts (train/layer_timing.h), or, where nothing ran (the estimator),
//     the forward and backward FLOPs of one token as their stand-in.
//   uniform: 1 per layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_options.h"
#include "engine/parallel/layer_partition.h"
#include "runtime/status.h"

namespace sluice::estimate {

// The compute time (forward and backward of one micro-batch) of the model's parts, in one unit.
struct LayerTimes {
  double embeddings = 0;
  double block = 0;  // one decoder block
  double tail = 0;   // final norm, LM head and loss
};

// The classes of the model's layer list that decoder layer `layer` carries, in order.
std::vector<std::string> LayerClasses(const model::ModelOptions& options, int64_t layer);

// Per FLOPs of one token, forward and backward (6 per matmul parameter and 12 d_attn T per
// layer's attention; the embeddings' lookup and the norms count 0): the estimator's stand-in
// for measured times.
LayerTimes FlopTimes(const model::ModelOptions& options, int64_t seq_len);

// n_layer weights for `spec`; `measured` the times for kTime (FlopTimes where null). Times are
// weighted in units of 1e-6 of the largest part's time, so that their ratios survive.
Result<std::vector<int64_t>> PartitionWeights(const model::ModelOptions& options,
                                              const parallel::PartitionSpec& spec,
                                              const LayerTimes* measured = nullptr,
                                              int64_t seq_len = 0);

}  // namespace sluice::estimate
