// Which decoder layers each pipeline stage holds: DeepSpeed's PipelineModule partition_method
// names, as a pure function of per-layer weights, for the trainer's stage builder and the memory
// estimator (engine/estimate/pipeline_estimate.h).
//
//   SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> bounds,
//                           PartitionLayers(weights, /*parts=*/4, PartitionMethod::kParameters));
//   // part p holds layers [bounds[p], bounds[p + 1]).
//
// "uniform" (DeepSpeed's partition_uniform): layers evenly, the first n % parts parts one more.
// The other methods balance weights the caller gives per layer (partition_balanced): the
// contiguous split whose heaviest part is as light as possible; among those, the one that fills
// earlier parts first. "parameters": the layers' parameter counts; "type:<regex>": 1 for each
// layer class the regex matches (DeepSpeed's binary weights); "time": measured compute times.
// A decoder model's first layer carries the embeddings and its last the final norm and head
// (estimate/partition_weights.h gives their weights), so that the first and last stages are not
// given a full share of blocks on top of them. Every part holds at least one layer (a stage
// without layers is a model without a unit: model_stage.h refuses it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace sluice::parallel {

enum class PartitionMethod { kUniform, kParameters, kType, kTime };

struct PartitionSpec {
  PartitionMethod method = PartitionMethod::kParameters;
  std::string type_regex;  // kType: what follows "type:", matched case-insensitively
};

// "uniform", "parameters", "type:<regex>" (the spec's), "time".
std::string PartitionMethodName(const PartitionSpec& spec);
// "uniform", "parameters", "time" or "type:<regex>" (the names case-insensitive, as DeepSpeed
// lowers them; the regex an ECMAScript one). InvalidArgument naming `key` and the accepted
// names otherwise, or the regex's error.
Result<PartitionSpec> ParsePartitionMethod(std::string_view name, std::string_view key);
// Whether `layer_class` matches the spec's regex anywhere in it, ignoring case (DeepSpeed's
// re.search with IGNORECASE). kType only.
bool MatchesLayerClass(const PartitionSpec& spec, std::string_view layer_class);

// parts + 1 ascending boundaries from 0 to layer_weights.size(). InvalidArgument naming
// `parts_key` when parts < 1 or parts > the number of layers (each part needs one), and when a
// weight is negative.
Result<std::vector<int64_t>> PartitionLayers(std::span<const int64_t> layer_weights, int parts,
                                             PartitionMethod method,
                                             std::string_view parts_key = "pipeline.stages");

}  // namespace sluice::parallel
