#include "engine/estimate/partition_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/estimate/stage_layout.h"
#include "engine/train/flops.h"
#include "runtime/check.h"

namespace sluice::estimate {
namespace {

std::string ClassList(const model::ModelOptions& options) {
  std::vector<std::string> all = LayerClasses(options, 0);
  const std::vector<std::string> tail = LayerClasses(options, options.n_layer - 1);
  for (const std::string& name : tail) {
    if (std::find(all.begin(), all.end(), name) == all.end()) all.push_back(name);
  }
  return fmt::format("{}", fmt::join(all, ", "));
}

}  // namespace

std::vector<std::string> LayerClasses(const model::ModelOptions& options, int64_t layer) {
  std::vector<std::string> classes;
  if (layer == 0) classes.emplace_back("Embeddings");
  classes.emplace_back("DecoderBlock");
  if (layer == options.n_layer - 1) {
    classes.emplace_back(options.family == model::Family::kGpt2 ? "LayerNorm" : "RmsNorm");
    classes.emplace_back("LMHead");
  }
  return classes;
}

LayerTimes FlopTimes(const model::ModelOptions& options, int64_t seq_len) {
  model::ModelOptions one = options;
  one.n_layer = 1;
  one.tensor_parallel_size = 1;
  one.tensor_parallel_rank = 0;
  const train::ModelFlops flops = train::CountModelFlops(one, seq_len);
  const double head = 6.0 * static_cast<double>(options.d_model * options.vocab_size);
  LayerTimes times;
  times.block = static_cast<double>(flops.per_token) - head;
  times.tail = head;
  return times;
}

Result<std::vector<int64_t>> PartitionWeights(const model::ModelOptions& options,
                                              const parallel::PartitionSpec& spec,
                                              const LayerTimes* measured, int64_t seq_len) {
  const auto n = static_cast<size_t>(options.n_layer);
  switch (spec.method) {
    case parallel::PartitionMethod::kUniform:
      return std::vector<int64_t>(n, 1);
    case parallel::PartitionMethod::kParameters:
      return LayerParameterWeights(options);
    case parallel::PartitionMethod::kType: {
      std::vector<int64_t> weights(n, 0);
      for (size_t i = 0; i < n; ++i) {
        for (const std::string& name : LayerClasses(options, static_cast<int64_t>(i))) {
          if (parallel::MatchesLayerClass(spec, name)) ++weights[i];
        }
      }
      if (std::all_of(weights.begin(), weights.end(), [](int64_t w) { return w == 0; })) {
        return InvalidArgumentError(
            "pipeline.partition_method \"{}\" matches none of the model's layer classes ({}): "
            "give a regex that matches some, e.g. \"type:DecoderBlock\"",
            parallel::PartitionMethodName(spec), ClassList(options));
      }
      return weights;
    }
    case parallel::PartitionMethod::kTime: {
      const LayerTimes t =
          measured != nullptr ? *measured : FlopTimes(options, seq_len > 0 ? seq_len : 1);
      const double largest = std::max({t.embeddings, t.block, t.tail});
      if (!(largest > 0) || !std::isfinite(largest) || t.embeddings < 0 || t.block < 0 ||
          t.tail < 0) {
        return InvalidArgumentError(
            "per-layer times (embeddings {}, block {}, tail {}) cannot weigh a partition: they "
            "must be finite, at least 0 and not all 0",
            t.embeddings, t.block, t.tail);
      }
      const auto weight = [largest](double time) {
        return static_cast<int64_t>(std::llround(time / largest * 1e6));
      };
      std::vector<int64_t> weights(n, weight(t.block));
      if (n > 0) {
        weights.front() += weight(t.embeddings);
        weights.back() += weight(t.tail);
      }
      return weights;
    }
  }
  SLUICE_CHECK(false) << "unknown partition method";
  return std::vector<int64_t>{};
}

}  // namespace sluice::estimate
