#include "cli/estimate_pipeline_stages.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>

#include "engine/config/config_schema.h"

namespace sluice::cli {
namespace {

constexpr std::string_view kKey = "pipeline.stages";

// The value as written, with where it was written.
struct Given {
  std::string text;
  std::string origin;
};

Result<int> ParseStages(const Given& given) {
  if (given.text == "auto") return 1;  // as the config's rule: "auto" is one stage
  int stages = 0;
  const char* end = given.text.data() + given.text.size();
  const auto [ptr, ec] = std::from_chars(given.text.data(), end, stages);
  if (ec != std::errc() || ptr != end || stages < 1) {
    return InvalidArgumentError("{} = \"{}\" ({}): the stage count must be a whole number from 1",
                                kKey, given.text, given.origin);
  }
  return stages;
}

}  // namespace

Result<PipelineStagesSetting> TakePipelineStages(
    std::vector<ConfigLayer>* layers, std::vector<std::pair<std::string, std::string>>* env,
    std::vector<std::string>* set_overrides) {
  std::optional<Given> last;
  for (ConfigLayer& layer : *layers) {
    if (layer.root.kind != ConfigNode::Kind::kMap) continue;
    for (ConfigNode::Entry& section : layer.root.entries) {
      if (section.key != "pipeline" || section.value.kind != ConfigNode::Kind::kMap) continue;
      std::vector<ConfigNode::Entry>& entries = section.value.entries;
      for (auto it = entries.begin(); it != entries.end();) {
        if (it->key != "stages") {
          ++it;
          continue;
        }
        if (it->value.kind != ConfigNode::Kind::kScalar) {
          return InvalidArgumentError("{} ({}) is {}, not a stage count", kKey,
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
    if (path != kKey) {
      ++it;
      continue;
    }
    last = Given{it->second, fmt::format("environment variable {}", it->first)};
    it = env->erase(it);
  }
  for (auto it = set_overrides->begin(); it != set_overrides->end();) {
    const size_t eq = it->find('=');
    if (eq == std::string::npos || std::string_view(*it).substr(0, eq) != kKey) {
      ++it;
      continue;
    }
    last = Given{it->substr(eq + 1), fmt::format("--set {}", *it)};
    it = set_overrides->erase(it);
  }
  PipelineStagesSetting setting;
  if (!last.has_value()) return setting;
  SLUICE_ASSIGN_OR_RETURN(setting.stages, ParseStages(*last));
  setting.origin = last->origin;
  return setting;
}

}  // namespace sluice::cli
