#include "engine/estimate/stage_layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/estimate/count_format.h"
#include "runtime/check.h"

namespace sluice::estimate {
namespace {

const UnitLayout& UnitNamed(const std::vector<UnitLayout>& units, std::string_view name) {
  for (const UnitLayout& unit : units) {
    if (unit.name == name) return unit;
  }
  SLUICE_CHECK(false);
  return units.front();
}

bool HoldsFirst(const StageShape& shape) {
  return std::any_of(shape.chunks.begin(), shape.chunks.end(),
                     [](const model::ModelStage& c) { return model::IsFirstStage(c); });
}

// One chunk's activation bytes: what a micro-batch keeps from its forward to its backward, and
// the peak while its backward runs (activation_estimate.cpp's whole-model formula with the
// chunk's blocks, its input in place of the embeddings' output when it is not the first).
struct ChunkActivations {
  int64_t held = 0;
  int64_t backward = 0;
  int64_t host_kept = 0;  // cpu_checkpointing: its checkpointed inputs, pinned
  int64_t checkpointed = 0;
  std::string text;
};

ChunkActivations ChunkBytes(const model::ModelOptions& o, const ActivationEstimate& whole,
                            const model::ModelStage& chunk) {
  const int64_t rd = whole.row_bytes;       // a received input, the head's input gradient
  const int64_t kd = whole.kept_row_bytes;  // a checkpointed block's input
  const int64_t rf = whole.mlp_grad_bytes;
  const int64_t blocks = chunk.end_layer - chunk.begin_layer;
  const int64_t ckpt = std::clamp<int64_t>(
      std::min(model::CheckpointedBlocks(o), chunk.end_layer) - chunk.begin_layer, 0, blocks);
  const int64_t full = blocks - ckpt;
  const bool host = ckpt > 0 && o.checkpointing.host;
  const bool contiguous = ckpt > 0 && o.checkpointing.contiguous;
  const bool first = model::IsFirstStage(chunk);
  const bool last = model::IsLastStage(o, chunk);
  const int64_t kept = ckpt == 0 ? 0 : host ? kd : contiguous ? (ckpt + 1) * kd : ckpt * kd;
  const int64_t restored = host ? kd : 0;
  const int64_t input = first ? whole.embeddings_saved_bytes : rd;
  const int64_t head = last ? whole.head_saved_bytes : 0;
  const int64_t block = whole.block_saved_bytes;

  ChunkActivations a;
  a.held = input + kept + full * block + head;
  const int64_t at_head = kept + full * block + std::max(head, full > 0 ? rf : 0);
  const int64_t at_recompute = ckpt > 0 ? kept + restored + block + rf : 0;
  a.backward = input + rd + std::max(at_head, at_recompute);
  a.host_kept = host ? ckpt * kd : 0;
  a.checkpointed = ckpt;
  a.text = fmt::format("{} {} + {} block(s){}{}", first ? "embeddings" : "received input R*d",
                       FormatCount(input / kF32), blocks,
                       ckpt > 0 ? fmt::format(" ({} checkpointed)", ckpt) : "",
                       last ? fmt::format(" + norm+logits {}", FormatCount(head / kF32)) : "");
  return a;
}

}  // namespace

std::vector<UnitLayout> DescribeStageUnits(const model::ModelOptions& options,
                                           const StageShape& shape, bool vocab_parallel) {
  const std::vector<UnitLayout> whole = DescribeUnits(options, vocab_parallel);
  const bool has_embeddings = HoldsFirst(shape);
  std::vector<UnitLayout> units;
  for (const model::ModelStage& chunk : shape.chunks) {
    if (model::IsFirstStage(chunk)) units.push_back(UnitNamed(whole, "embeddings"));
    UnitLayout block = UnitNamed(whole, "block");
    block.count = chunk.end_layer - chunk.begin_layer;
    units.push_back(std::move(block));
    if (model::IsLastStage(options, chunk)) {
      units.push_back(UnitNamed(whole, "final_norm"));
      UnitLayout head = UnitNamed(whole, "lm_head");
      if (options.tie_embeddings && !has_embeddings) {
        head.param_numels = {head.read_elements};  // its copy of (its piece of) the table
      }
      units.push_back(std::move(head));
    }
  }
  return units;
}

std::vector<int64_t> LayerParameterWeights(const model::ModelOptions& options) {
  // The whole model's counts whatever the tensor-parallel size: every tensor rank of a stage must
  // partition the layers alike, and rank 0's vocabulary piece may be one id longer.
  model::ModelOptions whole_model = options;
  whole_model.tensor_parallel_size = 1;
  whole_model.tensor_parallel_rank = 0;
  whole_model.sequence_parallel = false;
  const std::vector<UnitLayout> whole = DescribeUnits(whole_model);
  std::vector<int64_t> weights(static_cast<size_t>(options.n_layer),
                               UnitNamed(whole, "block").owned_elements());
  if (weights.empty()) return weights;
  weights.front() += UnitNamed(whole, "embeddings").owned_elements();
  weights.back() += UnitNamed(whole, "final_norm").owned_elements() +
                    UnitNamed(whole, "lm_head").owned_elements();
  return weights;
}

ActivationEstimate EstimateStageActivations(const model::ModelOptions& options,
                                            const StageShape& shape, int64_t micro_batch,
                                            int64_t seq, bool vocab_parallel) {
  SLUICE_CHECK(!shape.chunks.empty());
  SLUICE_CHECK_GE(shape.in_flight, 1);
  ActivationEstimate e = EstimateActivations(options, micro_batch, seq, vocab_parallel);
  int64_t held = 0;
  int64_t backward = 0;
  int64_t host_kept = 0;
  int64_t checkpointed = 0;
  std::string chunks;
  for (const model::ModelStage& chunk : shape.chunks) {
    const ChunkActivations a = ChunkBytes(options, e, chunk);
    held = std::max(held, a.held);
    backward = std::max(backward, a.backward);
    host_kept = std::max(host_kept, a.host_kept);
    checkpointed += a.checkpointed;
    if (!chunks.empty()) chunks += "; ";
    chunks += fmt::format("layers [{}, {}): {}", chunk.begin_layer, chunk.end_layer, a.text);
  }
  const std::string per_chunk = shape.chunks.size() > 1 ? " (the largest chunk's)" : "";
  e.checkpointed_blocks = checkpointed;
  e.peak_bytes = (shape.in_flight - 1) * held + backward;
  e.peak_formula = fmt::format(
      "stage {} of {}, {}: {} (micro-batch, chunk) pair(s) in flight at most: ({} - 1) x held "
      "per micro-batch{} {} + the backward's peak {} (4 B x: {}), R = {} tokens",
      shape.stage, shape.stages, shape.schedule, shape.in_flight, shape.in_flight, per_chunk,
      FormatCount(held), FormatCount(backward), chunks, FormatCount(e.tokens));
  e.host_kept_bytes = shape.in_flight * host_kept;
  e.host_formula = host_kept == 0 ? ""
                                  : fmt::format("{} in flight x checkpointed inputs{} {} (pinned)",
                                                shape.in_flight, per_chunk, FormatCount(host_kept));
  return e;
}

int64_t StageSendBytes(const model::ModelOptions& options, const StageShape& shape,
                       int64_t micro_batch, int64_t seq) {
  return int64_t{shape.sends} * micro_batch * seq * options.d_model * kF32;
}

}  // namespace sluice::estimate
