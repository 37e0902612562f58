#include "cli/estimate_pipeline_stages.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "engine/config/config_schema.h"

namespace sluice::cli {
namespace {

// The value as written, with where it was written.
struct Given {
  std::string text;
  std::string origin;
};

// A whole number from `lowest`, or "auto" where `auto_value` is set.
Result<int> ParseCount(std::string_view key, const Given& given, int lowest,
                       std::optional<int> auto_value, std::string_view what) {
  if (given.text == "auto" && auto_value.has_value()) return *auto_value;
  int count = 0;
  const char* end = given.text.data() + given.text.size();
  const auto [ptr, ec] = std::from_chars(given.text.data(), end, count);
  if (ec != std::errc() || ptr != end || count < lowest) {
    return InvalidArgumentError("{} = \"{}\" ({}): the {} must be a whole number from {}", key,
                                given.text, given.origin, what, lowest);
  }
  return count;
}

// Removes `key` (section.name) from every layer, the environment and the --set overrides; the
// last value given, if any.
Result<std::optional<Given>> TakeKey(std::string_view key, std::vector<ConfigLayer>* layers,
                                     std::vector<std::pair<std::string, std::string>>* env,
                                     std::vector<std::string>* set_overrides) {
  const size_t dot = key.find('.');
  const std::string_view section_name = key.substr(0, dot);
  const std::string_view name = key.substr(dot + 1);
  std::optional<Given> last;
  for (ConfigLayer& layer : *layers) {
    if (layer.root.kind != ConfigNode::Kind::kMap) continue;
    for (ConfigNode::Entry& section : layer.root.entries) {
      if (section.key != section_name || section.value.kind != ConfigNode::Kind::kMap) continue;
      std::vector<ConfigNode::Entry>& entries = section.value.entries;
      for (auto it = entries.begin(); it != entries.end();) {
        if (it->key != name) {
          ++it;
          continue;
        }
        if (it->value.kind != ConfigNode::Kind::kScalar) {
          return InvalidArgumentError("{} ({}) is {}, not a number", key,
                                      FormatSourcePos(layer.name, it->key_pos),
                                      it->value.Describe());
        }
        last = Given{it->value.text, FormatSourcePos(layer.name, it->key_pos)};
        it = entries.erase(it);
      }
    }
  }
  const SettingsRegistry& registry = ConfigRegistry();
  for (auto it = env->begin(); it != env->end();) {
    const std::optional<std::string> path = registry.PathFromEnvVar(it->first);
    if (path != key) {
      ++it;
      continue;
    }
    last = Given{it->second, fmt::format("environment variable {}", it->first)};
    it = env->erase(it);
  }
  for (auto it = set_overrides->begin(); it != set_overrides->end();) {
    const size_t eq = it->find('=');
    if (eq == std::string::npos || std::string_view(*it).substr(0, eq) != key) {
      ++it;
      continue;
    }
    last = Given{it->substr(eq + 1), fmt::format("--set {}", *it)};
    it = set_overrides->erase(it);
  }
  return last;
}

}  // namespace

Result<PipelineStagesSetting> TakePipelineStages(
    std::vector<ConfigLayer>* layers, std::vector<std::pair<std::string, std::string>>* env,
    std::vector<std::string>* set_overrides) {
  constexpr std::string_view kKey = "pipeline.stages";
  SLUICE_ASSIGN_OR_RETURN(std::optional<Given> last, TakeKey(kKey, layers, env, set_overrides));
  PipelineStagesSetting setting;
  if (!last.has_value()) return setting;
  // As the config's rule: "auto" is one stage.
  SLUICE_ASSIGN_OR_RETURN(setting.stages, ParseCount(kKey, *last, 1, 1, "stage count"));
  setting.origin = last->origin;
  return setting;
}

Result<PipelineStagesSetting> TakeTensorParallelSize(
    std::vector<ConfigLayer>* layers, std::vector<std::pair<std::string, std::string>>* env,
    std::vector<std::string>* set_overrides) {
  constexpr std::string_view kKey = "tensor_parallel.autotp_size";
  SLUICE_ASSIGN_OR_RETURN(std::optional<Given> last, TakeKey(kKey, layers, env, set_overrides));
  PipelineStagesSetting setting;
  if (!last.has_value()) return setting;
  SLUICE_ASSIGN_OR_RETURN(const int size,
                          ParseCount(kKey, *last, 0, std::nullopt, "tensor-parallel size"));
  setting.stages = std::max(1, size);  // 0 or 1: off
  setting.origin = last->origin;
  return setting;
}

}  // namespace sluice::cli
