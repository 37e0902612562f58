#include "engine/train/run_setup.h"

#include <fmt/format.h>

#include <utility>

#include "engine/config/config_tree.h"
#include "runtime/logging.h"

namespace sluice::train {
namespace {

// The model map of a --model file: its `model:` entry when that is the only top-level key,
// else the whole document.
Result<ConfigNode> ReadModelSection(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ReadConfigFile(path));
  if (root.kind != ConfigNode::Kind::kMap) {
    return InvalidArgumentError(
        "{}: a --model file holds the model section as a mapping (family: gpt2, n_layer: 4, ...) "
        "or under a top-level `model:` key; this file holds {}",
        path, root.Describe());
  }
  if (root.entries.size() == 1 && root.entries[0].key == "model") {
    ConfigNode section = std::move(root.entries[0].value);
    if (section.kind != ConfigNode::Kind::kMap) {
      return InvalidArgumentError("{}: `model` must be a mapping, not {}", path,
                                  section.Describe());
    }
    return section;
  }
  return root;
}

// Replaces (or adds) the model entry of `root`.
void SetModelSection(ConfigNode& root, ConfigNode model) {
  if (root.kind != ConfigNode::Kind::kMap) {
    root = ConfigNode();
    root.kind = ConfigNode::Kind::kMap;
  }
  for (ConfigNode::Entry& entry : root.entries) {
    if (entry.key == "model") {
      SLUICE_LOG(kInfo, "train", "the --model file replaces the config file's model section");
      entry.value = std::move(model);
      return;
    }
  }
  ConfigNode::Entry entry;
  entry.key = "model";
  entry.value = std::move(model);
  root.entries.push_back(std::move(entry));
}

Status CheckTrainable(const Config& config, const TrainConfigSources& sources) {
  if (!config.model.present) {
    return InvalidArgumentError(
        "{} has no model section and no --model file was given: sluice train needs a model; add "
        "a `model:` section (family, n_layer, n_head, d_model, seq_len, ...) or pass --model "
        "FILE (see sluice train --help-config)",
        sources.config_path.empty() ? std::string("the config") : sources.config_path);
  }
  if (!config.data.train_path.has_value() || config.data.train_path->empty()) {
    return InvalidArgumentError(
        "data.train_path is not set: sluice train needs a training file (text or tokens); add "
        "`data: {{train_path: FILE}}` or --set data.train_path=FILE");
  }
  return OkStatus();
}

}  // namespace

Result<Config> LoadTrainConfig(const TrainConfigSources& sources) {
  ConfigSources config_sources;
  config_sources.path = sources.config_path;
  config_sources.set_overrides = sources.set_overrides;
  config_sources.env = sources.env;
  config_sources.world_size = 1;

  ConfigNode root;
  if (!sources.config_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(root, ReadConfigFile(sources.config_path));
  }
  if (!sources.model_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(ConfigNode model, ReadModelSection(sources.model_path));
    SetModelSection(root, std::move(model));
  }
  Result<Config> loaded = LoadConfigFromTree(root, sources.config_path, config_sources);
  if (!loaded.ok() && !sources.model_path.empty()) {
    // A model.* key's line:col then refers to the model file.
    return Status(loaded.status())
        .WithContext(fmt::format("{} with the model section from {}", sources.config_path,
                                 sources.model_path));
  }
  SLUICE_ASSIGN_OR_RETURN(Config config, std::move(loaded));
  SLUICE_RETURN_IF_ERROR(CheckTrainable(config, sources));
  return config;
}

Result<model::ModelOptions> ModelOptionsFromConfig(const Config& config, Precision precision) {
  const ModelConfig& m = config.model;
  model::ModelOptions options;
  options.family = m.family == ModelFamily::kLlama ? model::Family::kLlama : model::Family::kGpt2;
  options.n_layer = m.n_layer;
  options.n_head = m.n_head;
  options.n_kv_head = m.n_kv_head;
  options.d_model = m.d_model;
  options.d_ff = m.d_ff;
  options.vocab_size = m.vocab_size;
  options.seq_len = m.seq_len;
  options.tie_embeddings = m.tie_embeddings;
  options.init_std = m.init_std;
  options.param_dtype = ModelParamDType(precision);
  options.num_threads = config.device.threads;
  SLUICE_RETURN_IF_ERROR(model::ValidateModelOptions(options));
  return options;
}

data::DataOptions DataOptionsFromConfig(const Config& config) {
  data::DataOptions options;
  options.train_path = config.data.train_path.value_or("");
  options.val_path = config.data.val_path.value_or("");
  switch (config.data.format) {
    case DataFormat::kText:
      options.format = data::TokenFormat::kText;
      break;
    case DataFormat::kNanogptU16:
      options.format = data::TokenFormat::kNanogptU16;
      break;
    case DataFormat::kLlmcBin:
      options.format = data::TokenFormat::kLlmcBin;
      break;
    case DataFormat::kAuto:
      options.format = data::TokenFormat::kAuto;
      break;
  }
  options.seq_len = config.model.seq_len;
  options.val_fraction = config.data.val_fraction;
  options.seed = static_cast<uint64_t>(config.data.seed);
  options.vocab_size = config.model.vocab_size;
  return options;
}

std::string DescribeModel(const model::ModelOptions& o) {
  std::string text =
      fmt::format("{}, n_layer {}, n_head {}", model::FamilyName(o.family), o.n_layer, o.n_head);
  if (o.n_kv_head != o.n_head) text += fmt::format(", n_kv_head {}", o.n_kv_head);
  text += fmt::format(", d_model {}, d_ff {}, seq_len {}", o.d_model, o.d_ff, o.seq_len);
  return text;
}

}  // namespace sluice::train
