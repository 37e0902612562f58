// Which decoder layers each pipeline stage holds: DeepSpeed's PipelineModule partition_method
// names, as a pure function of per-layer weights, for the trainer's stage builder and the memory
// estimator (engine/estimate/pipeline_estimate.h).
//
//   SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> bounds,
//                           PartitionLayers(weights, /*parts=*/4, PartitionMethod::kParameters));
//   // part p holds layers [bounds[p], bounds[p + 1]).
//
// "uniform" (DeepSpeed's partition_uniform): layers evenly, the first n % parts parts one more.
// "parameters" (partition_balanced over the layers' parameter counts): the contiguous split whose
// heaviest part is as light as possible; among those, the one that fills earlier parts first. The
// caller gives the weights: a decoder model's first layer carries the embeddings and its last
// the final norm and head, so that the first and last stages are not given a full share of blocks
// on top of them. Every part holds at least one layer (a stage without layers is a model without
// a unit: model_stage.h refuses it).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace sluice::parallel {

enum class PartitionMethod { kUniform, kParameters };

// "uniform", "parameters".
std::string_view PartitionMethodName(PartitionMethod method);
// "uniform" or "parameters" (case-insensitive, as DeepSpeed lowers it); InvalidArgument naming
// `key` and the accepted names otherwise (DeepSpeed's "type:<regex>" included: no layer types).
Result<PartitionMethod> ParsePartitionMethod(std::string_view name, std::string_view key);

// parts + 1 ascending boundaries from 0 to layer_weights.size(). InvalidArgument naming
// `parts_key` when parts < 1 or parts > the number of layers (each part needs one), and when a
// weight is negative.
Result<std::vector<int64_t>> PartitionLayers(std::span<const int64_t> layer_weights, int parts,
                                             PartitionMethod method,
                                             std::string_view parts_key = "pipeline.stages");

}  // namespace sluice::parallel
