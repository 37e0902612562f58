// The parameter layout of a model, computed from its options without building it: the units the
// engine fetches, releases and reduces (embeddings, each decoder block, the final norm, the LM
// head) with the element count of every parameter they own and the elements they read (a tied
// LM head reads the token table it does not own); under tensor parallelism one tensor rank's
// pieces (engine/parallel/tensor_layout.h). It mirrors what Model::Create registers
// (parameter_registry.h) and is checked against a real registry in tests/estimate; the memory
// estimator needs it for the largest unit (ZeRO-3 gathers whole units, bf16 storage widens one
// unit at a time) and for the parameters below stage3_param_persistence_threshold.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_options.h"

namespace sluice::estimate {

struct UnitLayout {
  std::string name;                   // "embeddings", "block", "final_norm", "lm_head"
  int64_t count = 1;                  // identical units of this kind (n_layer for blocks)
  std::vector<int64_t> param_numels;  // owned parameters, one entry each
  int64_t read_elements = 0;          // elements the unit reads, tied weights included

  int64_t owned_elements() const;
};

// In trace order; the decoder blocks are one entry with count = n_layer. With
// options.tensor_parallel_size > 1 the element counts are tensor rank
// options.tensor_parallel_rank's pieces (parallel::TensorShardingOf, the plan's rules; the
// vocabulary tables split only with `vocab_parallel`, as the ops backend allows). `options` must
// pass model::ValidateModelOptions, with at least one vocabulary id per tensor rank.
std::vector<UnitLayout> DescribeUnits(const model::ModelOptions& options,
                                      bool vocab_parallel = true);

struct LayoutSummary {
  int64_t parameters = 0;          // equals model::CountParameters(options)
  int64_t largest_unit_owned = 0;  // elements of the largest unit's own range
  int64_t largest_unit_read = 0;   // elements the largest reader reads (bf16 widening)
  // Parameters whose element count is <= a threshold (ZeRO-3 keeps them gathered).
  int64_t persistent_elements = 0;
  // The largest unit's owned elements that are not persistent (what a fetch gathers).
  int64_t largest_unit_gathered = 0;
};

// persistence_threshold < 0: no parameter is persistent.
LayoutSummary SummarizeLayout(const std::vector<UnitLayout>& units,
                              int64_t persistence_threshold = -1);

}  // namespace sluice::estimate
