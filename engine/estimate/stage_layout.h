// One pipeline stage's share of the model, for the memory estimator: the units it holds (the
// parameters ZeRO shards over the stage's data-parallel group) and the activations its schedule
// keeps in flight. pipeline_estimate.h builds the shapes from a partition and a schedule;
// EstimateMemory (memory_estimate.h) estimates one stage with EstimateOptions::pipeline_stage.
//
// Roles follow model_stage.h: the chunk with layer 0 holds the embeddings, the chunk ending at
// n_layer the final norm and the LM head. A tied LM head on a stage without the embeddings is
// counted as a copy of the token table there (Megatron's embedding group; the gradients of the
// two copies are summed before each step), as Model::CreateStage builds it (a mirror).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/estimate/activation_estimate.h"
#include "engine/estimate/model_layout.h"
#include "engine/model/model_options.h"
#include "engine/model/model_stage.h"

namespace sluice::estimate {

struct StageShape {
  int stage = 0;   // r of P
  int stages = 1;  // P
  // The layer ranges the stage holds, chunk 0 first: one, or v with an interleaved schedule.
  std::vector<model::ModelStage> chunks;
  // The most (micro-batch, chunk) pairs forwarded and not yet through their backward at once
  // (SimulateSchedule's peak_in_flight): GPipe M, 1F1B min(P - r, M), ZB-H1 <= min(P, M).
  int in_flight = 1;
  // The step's sends of hidden states and their gradients: the executor keeps each send's
  // [micro_batch * seq, d_model] buffer until the step's tail (pipeline_executor.h, "Memory").
  int sends = 0;
  std::string schedule;  // "1f1b", for the formulas
};

// The stage's units in trace order (chunk by chunk). Parameters sum to the whole model's over the
// stages, plus one token table per copy of a tied head (see above). Under tensor parallelism
// a tensor rank's pieces (DescribeUnits).
std::vector<UnitLayout> DescribeStageUnits(const model::ModelOptions& options,
                                           const StageShape& shape, bool vocab_parallel = true);

// Per decoder layer, the parameters a stage holding it would own: a block's, with the embeddings
// on layer 0 and the final norm and an untied head on layer n_layer - 1 (the weights of
// parallel::PartitionMethod::kParameters). The whole model's, at any tensor-parallel size.
std::vector<int64_t> LayerParameterWeights(const model::ModelOptions& options);

// The stage's activations at its peak: every in-flight micro-batch's saved tensors, one of them
// in its backward (the whole-model formula of activation_estimate.h applied to the stage's
// chunk), plus the send buffers (category buffers, see EstimateMemory). `options` and
// `vocab_parallel` as for EstimateActivations; a stage of the whole model with one micro-batch
// in flight gives EstimateActivations' figures.
ActivationEstimate EstimateStageActivations(const model::ModelOptions& options,
                                            const StageShape& shape, int64_t micro_batch,
                                            int64_t seq, bool vocab_parallel = true);

// The send buffers' bytes: sends x micro_batch x seq x d_model x 4 B (fp32 hidden states).
int64_t StageSendBytes(const model::ModelOptions& options, const StageShape& shape,
                       int64_t micro_batch, int64_t seq);

}  // namespace sluice::estimate
