#include "engine/parallel/layer_partition.h"

#include <algorithm>
#include <numeric>
#include <regex>
#include <string>

#include "runtime/ascii_case.h"
#include "runtime/check.h"

namespace sluice::parallel {
namespace {

// DeepSpeed's partition_uniform: chunks of n / parts, the first n % parts one longer.
std::vector<int64_t> Uniform(int64_t n, int parts) {
  std::vector<int64_t> bounds(static_cast<size_t>(parts) + 1, 0);
  const int64_t chunk = n / parts;
  const int64_t residual = n % parts;
  for (int p = 1; p <= parts; ++p) {
    bounds[p] = bounds[p - 1] + chunk + (p - 1 < residual ? 1 : 0);
  }
  return bounds;
}

// Parts of at most `bottleneck` each, each taking as many layers as fit while leaving one for
// every later part; the last takes the rest. Empty when the rest does not fit.
std::vector<int64_t> FillEarly(std::span<const int64_t> w, int parts, int64_t bottleneck) {
  const auto n = static_cast<int64_t>(w.size());
  std::vector<int64_t> bounds{0};
  int64_t at = 0;
  for (int p = 0; p < parts - 1; ++p) {
    const int64_t limit = n - (parts - 1 - p);  // layers [at, limit) are this part's to take
    int64_t sum = w[at];
    int64_t end = at + 1;  // every part takes at least one layer
    while (end < limit && sum + w[end] <= bottleneck) sum += w[end++];
    if (sum > bottleneck) return {};
    bounds.push_back(at = end);
  }
  int64_t rest = 0;
  for (int64_t i = at; i < n; ++i) rest += w[i];
  if (rest > bottleneck) return {};
  bounds.push_back(n);
  return bounds;
}

}  // namespace

std::string PartitionMethodName(const PartitionSpec& spec) {
  switch (spec.method) {
    case PartitionMethod::kUniform:
      return "uniform";
    case PartitionMethod::kParameters:
      return "parameters";
    case PartitionMethod::kType:
      return "type:" + spec.type_regex;
    case PartitionMethod::kTime:
      return "time";
  }
  return "?";
}

Result<PartitionSpec> ParsePartitionMethod(std::string_view name, std::string_view key) {
  const std::string lower = AsciiLower(name);
  if (lower == "uniform") return PartitionSpec{PartitionMethod::kUniform, ""};
  if (lower == "parameters") return PartitionSpec{PartitionMethod::kParameters, ""};
  if (lower == "time") return PartitionSpec{PartitionMethod::kTime, ""};
  if (lower.rfind("type:", 0) == 0) {
    PartitionSpec spec{PartitionMethod::kType, std::string(name.substr(5))};
    if (spec.type_regex.empty()) {
      return InvalidArgumentError(
          "{} \"{}\": give a regex of layer classes after \"type:\", e.g. \"type:DecoderBlock\"",
          key, name);
    }
    try {
      (void)std::regex(spec.type_regex, std::regex::ECMAScript | std::regex::icase);
    } catch (const std::regex_error& error) {
      return InvalidArgumentError("{} \"{}\": \"{}\" is not a valid regex ({})", key, name,
                                  spec.type_regex, error.what());
    }
    return spec;
  }
  return InvalidArgumentError(
      "{} \"{}\" is not a partition method Sluice knows: use \"uniform\" (layers evenly), "
      "\"parameters\" (balance the stages' parameter counts), \"type:<regex>\" (balance the "
      "layers whose class the regex matches) or \"time\" (balance the per-layer times measured "
      "when training starts)",
      key, name);
}

bool MatchesLayerClass(const PartitionSpec& spec, std::string_view layer_class) {
  SLUICE_CHECK(spec.method == PartitionMethod::kType) << PartitionMethodName(spec);
  const std::regex pattern(spec.type_regex, std::regex::ECMAScript | std::regex::icase);
  return std::regex_search(layer_class.begin(), layer_class.end(), pattern);
}

Result<std::vector<int64_t>> PartitionLayers(std::span<const int64_t> layer_weights, int parts,
                                             PartitionMethod method, std::string_view parts_key) {
  const auto n = static_cast<int64_t>(layer_weights.size());
  if (parts < 1) return InvalidArgumentError("{} = {} must be at least 1", parts_key, parts);
  if (parts > n) {
    return InvalidArgumentError(
        "{} = {} is more than the model's {} decoder layers (model.n_layer): every stage holds at "
        "least one layer; use at most {} stages or a deeper model",
        parts_key, parts, n, n);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (layer_weights[i] < 0) {
      return InvalidArgumentError("layer {}'s partition weight {} is negative", i,
                                  layer_weights[i]);
    }
  }
  if (method == PartitionMethod::kUniform) return Uniform(n, parts);

  // The lightest bottleneck at which the layers fit in `parts` parts: FillEarly succeeds at a
  // bottleneck iff any split does (taking as much as fits never leaves a later part worse off),
  // and success is monotone in the bottleneck, so a binary search finds it.
  int64_t lo = *std::max_element(layer_weights.begin(), layer_weights.end());
  int64_t hi = std::accumulate(layer_weights.begin(), layer_weights.end(), int64_t{0});
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (FillEarly(layer_weights, parts, mid).empty()) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  std::vector<int64_t> bounds = FillEarly(layer_weights, parts, lo);
  SLUICE_CHECK(!bounds.empty());
  return bounds;
}

}  // namespace sluice::parallel
