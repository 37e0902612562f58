#include "engine/estimate/estimate_config.h"

#include <fmt/format.h>

#include <utility>

#include "engine/config/config_tree.h"

namespace sluice::estimate {
namespace {

ConfigNode EmptyMap() {
  ConfigNode node;
  node.kind = ConfigNode::Kind::kMap;
  return node;
}

ConfigNode* FindEntry(ConfigNode& map, std::string_view key) {
  for (ConfigNode::Entry& entry : map.entries) {
    if (entry.key == key) return &entry.value;
  }
  return nullptr;
}

// Merges `from` over `into`: maps key by key, anything else replaced.
void MergeOver(ConfigNode& into, ConfigNode from) {
  if (into.kind != ConfigNode::Kind::kMap || from.kind != ConfigNode::Kind::kMap) {
    into = std::move(from);
    return;
  }
  for (ConfigNode::Entry& entry : from.entries) {
    if (ConfigNode* existing = FindEntry(into, entry.key); existing != nullptr) {
      MergeOver(*existing, std::move(entry.value));
    } else {
      into.entries.push_back(std::move(entry));
    }
  }
}

// The --model file as a document with a `model` section.
Result<ConfigNode> ReadModelDocument(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ReadConfigFile(path));
  if (root.kind != ConfigNode::Kind::kMap) {
    return InvalidArgumentError(
        "{}: a --model file holds the model section as a mapping (family: gpt2, n_layer: 4, ...) "
        "or under a top-level `model:` key; this file holds {}",
        path, root.Describe());
  }
  if (ConfigNode* model = FindEntry(root, "model"); model != nullptr) {
    if (model->kind != ConfigNode::Kind::kMap) {
      return InvalidArgumentError("{}: `model` must be a mapping, not {}", path, model->Describe());
    }
    return root;
  }
  ConfigNode document = EmptyMap();
  document.entries.push_back(ConfigNode::Entry{"model", {}, std::move(root)});
  return document;
}

}  // namespace

Result<Config> LoadEstimateConfig(const EstimateConfigSources& sources) {
  if (sources.config_path.empty()) {
    return InvalidArgumentError(
        "--config FILE is required (a YAML or JSON config; a DeepSpeed ds_config.json works with "
        "--model FILE for the model)");
  }
  ConfigSources config_sources;
  config_sources.path = sources.config_path;
  config_sources.set_overrides = sources.set_overrides;
  config_sources.env = sources.env;
  config_sources.world_size = sources.world_size;

  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ReadConfigFile(sources.config_path));
  if (root.kind == ConfigNode::Kind::kNull) root = EmptyMap();
  std::string source_name = sources.config_path;
  if (!sources.model_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(ConfigNode document, ReadModelDocument(sources.model_path));
    MergeOver(root, std::move(document));
    source_name = fmt::format("{} + {}", sources.config_path, sources.model_path);
  }
  Result<Config> config = LoadConfigFromTree(root, source_name, config_sources);
  if (!config.ok() && !sources.model_path.empty()) {
    // Positions (line:col) in the message refer to whichever file the key came from.
    return Status(config.status())
        .WithContext(fmt::format("{} merged with the --model file {}", sources.config_path,
                                 sources.model_path));
  }
  return config;
}

}  // namespace sluice::estimate
