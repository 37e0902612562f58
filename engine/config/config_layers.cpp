#include "engine/config/config_layers.h"

#include <fmt/format.h>

#include <utility>

namespace sluice {

Result<ConfigLayer> ReadConfigLayer(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ReadConfigFile(path));
  return ConfigLayer{std::move(root), path};
}

Result<ConfigLayer> ReadModelLayer(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ReadConfigFile(path));
  if (root.kind != ConfigNode::Kind::kMap) {
    return InvalidArgumentError(
        "{}: a --model file holds the model section as a mapping (family: gpt2, n_layer: 4, ...) "
        "or under a top-level `model:` key; this file holds {}",
        FormatSourcePos(path, root.pos), root.Describe());
  }
  for (const ConfigNode::Entry& entry : root.entries) {
    if (entry.key == "model") return ConfigLayer{std::move(root), path};
  }
  ConfigNode document;
  document.kind = ConfigNode::Kind::kMap;
  SourcePos pos = root.pos;
  document.entries.push_back(ConfigNode::Entry{"model", pos, std::move(root)});
  return ConfigLayer{std::move(document), path};
}

Result<std::vector<ConfigLayer>> ReadConfigLayers(const std::vector<std::string>& paths,
                                                  const std::string& model_path) {
  std::vector<ConfigLayer> layers;
  for (size_t i = 0; i < paths.size(); ++i) {
    Result<ConfigLayer> layer = ReadConfigLayer(paths[i]);
    if (!layer.ok()) {
      if (paths.size() == 1) return layer.status();
      return Status(layer.status())
          .WithContext(fmt::format("--config #{} of {}", i + 1, paths.size()));
    }
    layers.push_back(std::move(layer).value());
  }
  if (!model_path.empty()) {
    Result<ConfigLayer> layer = ReadModelLayer(model_path);
    if (!layer.ok()) return Status(layer.status()).WithContext("--model");
    layers.push_back(std::move(layer).value());
  }
  return layers;
}

std::string JoinLayerNames(const std::vector<ConfigLayer>& layers) {
  std::string joined;
  for (const ConfigLayer& layer : layers) {
    if (!joined.empty()) joined += " + ";
    joined += layer.name;
  }
  return joined;
}

}  // namespace sluice
