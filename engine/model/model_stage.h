// Pipeline stages of a decoder (pipeline parallelism): which part of the model a Model holds, and
// what one micro-batch brings to a stage's Forward and Backward (model.h, "Passes").
//
// A stage holds the decoder layers [begin_layer, end_layer), at least one. Its roles follow from
// the range: the first stage (begin_layer == 0) also holds the token embeddings (GPT-2: and the
// learned positions) and takes token ids; the last stage (end_layer == n_layer) also holds the
// final norm, the LM head and the cross-entropy, and takes the targets. The stage [0, n_layer)
// is the whole model, with the same parameter registry (names, offsets, units) and the same
// results bit for bit. A stage's parameters keep their Hugging Face names, so a checkpoint or a
// whole model's values map onto a stage by name.
//
// Chunks. With an interleaved schedule a pipeline rank holds several stages of one model, its
// chunks (Model::CreateChunks): ranges in ascending layer order that do not overlap, e.g. layers
// [0, 2) and [4, 6) of 8 on rank 0 of two. The chunk with layer 0 has the first stage's roles and
// the one ending at n_layer the last's.
//
// Tied embeddings. A tied LM head reads the token table. A last stage without the embeddings
// holds its own copy of the table under the table's name (ParameterInfo::mirror), initialized as
// the first stage's; the ZeRO engine sums the two copies' gradients before every optimizer step
// (Megatron's "embedding group", DeepSpeed's ReduceTiedGrads), so they stay equal.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/model/model_options.h"
#include "runtime/status.h"

namespace sluice::model {

struct ModelStage {
  int64_t begin_layer = 0;
  int64_t end_layer = 0;
};

// The stage that is the whole model: [0, n_layer).
ModelStage WholeModelStage(const ModelOptions& options);
// OK, or InvalidArgument naming the range and what to change: 0 <= begin < end <= n_layer.
Status ValidateModelStage(const ModelOptions& options, const ModelStage& stage);
// OK, or InvalidArgument naming the chunk: at least one, each valid, ascending and disjoint.
Status ValidateModelChunks(const ModelOptions& options, std::span<const ModelStage> chunks);
inline bool IsFirstStage(const ModelStage& stage) { return stage.begin_layer == 0; }
inline bool IsLastStage(const ModelOptions& options, const ModelStage& stage) {
  return stage.end_layer == options.n_layer;
}
// "layers [2, 4) of 4 (last stage)", for messages.
std::string DescribeModelStage(const ModelOptions& options, const ModelStage& stage);

// What Model::Forward takes for one micro-batch. Host arrays are copied before Forward returns;
// device memory is read by work Forward enqueues on the model's stream.
template <typename T>
struct StageInput {
  int64_t batch = 0;  // sequences; at least 1
  int64_t seq = 0;    // tokens per sequence; 1 to model.seq_len
  // First stage: [batch, seq] token ids, host memory. Null elsewhere.
  const int32_t* tokens = nullptr;
  // Other stages: the previous stage's output, [batch * seq, d_model] in the model's device
  // memory, finished or ordered before the model's stream (Stream::WaitEvent). Null on the first.
  const T* hidden = nullptr;
  // Last stage: [batch, seq] targets (kIgnoreIndex rows skipped), host memory. Null elsewhere.
  const int32_t* targets = nullptr;
  // Last stage, passes without gradients only: host memory [batch * seq, vocab_size] that
  // receives the logits (when the pass ends) instead of a loss; targets are then not needed.
  T* logits = nullptr;
};

// What Model::Backward takes for one micro-batch.
template <typename T>
struct StageOutputGrad {
  // Last stage: d(objective)/d(mean loss of the micro-batch), e.g. 1 / micro-batches.
  double loss_grad = 1.0;
  // Other stages: d(objective)/d(output), [batch * seq, d_model] in the model's device memory,
  // finished or ordered before the model's stream. Null on the last stage.
  const T* hidden = nullptr;
};

}  // namespace sluice::model
