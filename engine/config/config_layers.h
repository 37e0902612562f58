// The files a config is made of, read in the order they are layered: the --config files, then an
// optional --model file. Layers are applied one after another to the same setting values, so a
// later layer wins key by key: sections merge recursively, and a setting (a scalar or a list)
// takes the later layer's value. YAML and JSON layers may be mixed (a DeepSpeed ds_config.json
// plus a YAML snippet from `sluice bench aio --tune`).
#pragma once

#include <string>
#include <vector>

#include "engine/config/config_tree.h"
#include "runtime/status.h"

namespace sluice {

struct ConfigLayer {
  ConfigNode root;   // the document: a mapping, or null for an empty file
  std::string name;  // the file; messages about its keys start with name:line:col
};

// Reads one config file (ReadConfigFile: .json JSON, .yaml/.yml YAML, else sniffed).
Result<ConfigLayer> ReadConfigLayer(const std::string& path);

// Reads a --model file. A document with a top-level `model:` key is a layer as it is; any other
// mapping is the model section itself and becomes `model: {...}` (its keys keep their
// positions, so an unknown model key is reported at model_file:line:col).
Result<ConfigLayer> ReadModelLayer(const std::string& path);

// Every layer in order: `paths`, then `model_path` when not empty. A file that cannot be read is
// an error naming it and its place in the list ("--config #2 of 2").
Result<std::vector<ConfigLayer>> ReadConfigLayers(const std::vector<std::string>& paths,
                                                  const std::string& model_path);

// The layer names joined by " + " (Config::source_file).
std::string JoinLayerNames(const std::vector<ConfigLayer>& layers);

}  // namespace sluice
