#include "engine/model/model_stage.h"

#include <fmt/format.h>

namespace sluice::model {

ModelStage WholeModelStage(const ModelOptions& options) { return {0, options.n_layer}; }

Status ValidateModelStage(const ModelOptions& options, const ModelStage& stage) {
  const int64_t begin = stage.begin_layer;
  const int64_t end = stage.end_layer;
  if (begin < 0 || end > options.n_layer || begin >= end) {
    const char* why = begin < 0               ? "begins before layer 0"
                      : end > options.n_layer ? "ends past the last layer"
                      : begin == end          ? "is empty"
                                              : "ends before it begins";
    return InvalidArgumentError(
        "pipeline stage of decoder layers [{}, {}) {}: a stage holds layers [begin, end) with 0 "
        "<= begin < end <= model.n_layer = {} (at least one layer each)",
        begin, end, why, options.n_layer);
  }
  return OkStatus();
}

Status ValidateModelChunks(const ModelOptions& options, std::span<const ModelStage> chunks) {
  if (chunks.empty()) {
    return InvalidArgumentError("a model needs at least one chunk of decoder layers");
  }
  for (size_t c = 0; c < chunks.size(); ++c) {
    Status valid = ValidateModelStage(options, chunks[c]);
    if (!valid.ok()) return valid.WithContext(fmt::format("model chunk {}", c));
    if (c > 0 && chunks[c].begin_layer < chunks[c - 1].end_layer) {
      return InvalidArgumentError(
          "model chunk {} (layers [{}, {})) begins before chunk {} (layers [{}, {})) ends: a "
          "model's chunks hold disjoint layer ranges in ascending order",
          c, chunks[c].begin_layer, chunks[c].end_layer, c - 1, chunks[c - 1].begin_layer,
          chunks[c - 1].end_layer);
    }
  }
  return OkStatus();
}

std::string DescribeModelStage(const ModelOptions& options, const ModelStage& stage) {
  const bool first = IsFirstStage(stage);
  const bool last = IsLastStage(options, stage);
  const char* role = first && last ? "whole model"
                     : first       ? "first stage"
                     : last        ? "last stage"
                                   : "middle stage";
  return fmt::format("layers [{}, {}) of {} ({})", stage.begin_layer, stage.end_layer,
                     options.n_layer, role);
}

}  // namespace sluice::model
