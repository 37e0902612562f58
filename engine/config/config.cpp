#include "engine/config/config.h"

#include <unistd.h>

#include "engine/config/config_stages.h"
#include "runtime/check.h"

extern char** environ;

namespace sluice {
namespace {

std::vector<std::pair<std::string, std::string>> ProcessEnvironment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string_view item(*p);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return env;
}

// Loads the layers; `problems` as in the Apply* stages (nullptr: stop at the first error).
Result<Config> LoadLayers(const std::vector<ConfigLayer>& layers, const ConfigSources& sources,
                          std::vector<Status>* problems) {
  Config config{Config::Blank{}};
  for (const ConfigLayer& layer : layers) config.source_files.push_back(layer.name);
  config.source_file = JoinLayerNames(layers);
  config.world_size = sources.world_size;
  config.dp_world_size = sources.world_size;
  // Each layer is applied over the previous ones: a setting keeps the value (and the origin,
  // file:line:col) of the last layer that gives it, and sections merge key by key.
  for (const ConfigLayer& layer : layers) {
    SLUICE_RETURN_IF_ERROR(
        ApplyConfigDocument(layer.root, layer.name, &config.values, &config.notes, problems));
  }
  SLUICE_RETURN_IF_ERROR(ApplyEnvOverrides(sources.env ? *sources.env : ProcessEnvironment(),
                                           &config.values, &config.notes, problems));
  SLUICE_RETURN_IF_ERROR(
      ApplySetOverrides(sources.set_overrides, &config.values, &config.notes, problems));
  // The cross-key rules would judge a config with keys missing: they wait for a clean one.
  if (problems != nullptr && !problems->empty()) {
    return FailedPreconditionError("{} settings were not applied", problems->size());
  }
  ResolveContext context;
  context.world_size = sources.world_size;
  context.available_host_memory = sources.available_host_memory;
  context.source_name = config.source_file;
  SLUICE_RETURN_IF_ERROR(ResolveConfigValues(context, &config.values, &config.notes));
  SLUICE_RETURN_IF_ERROR(BuildConfigSections(config.values, &config));
  config.dp_world_size = config.world_size / (config.parallel.tensor * config.parallel.pipeline);
  return config;
}

}  // namespace

Config::Config() {
  static const Config* const defaults = [] {
    ConfigSources sources;
    sources.env.emplace();  // the registry's values, not this process's SLUICE_CFG_*
    // DeepSpeed's rule wants a batch size given: one sequence per rank, no accumulation.
    sources.set_overrides = {"train_micro_batch_size_per_gpu=1"};
    Result<Config> config = LoadLayers({}, sources, nullptr);
    SLUICE_CHECK(config.ok()) << "the settings registry's defaults do not load: "
                              << config.status().ToString();
    return new Config(std::move(config).value());
  }();
  *this = *defaults;
}

Result<Config> LoadConfigFromLayers(const std::vector<ConfigLayer>& layers,
                                    const ConfigSources& sources) {
  return LoadLayers(layers, sources, nullptr);
}

ConfigCheckReport CheckConfigLayersAll(const std::vector<ConfigLayer>& layers,
                                       const ConfigSources& sources) {
  ConfigCheckReport report;
  Result<Config> config = LoadLayers(layers, sources, &report.problems);
  if (config.ok()) {
    report.config = std::move(config).value();
  } else if (report.problems.empty()) {
    report.problems.push_back(config.status());
  }
  return report;
}

Result<ConfigCheckReport> CheckConfigAll(const ConfigSources& sources) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<ConfigLayer> layers,
                          ReadConfigLayers(sources.paths, sources.model_path));
  return CheckConfigLayersAll(layers, sources);
}

Result<Config> LoadConfigFromTree(const ConfigNode& root, std::string_view source_name,
                                  const ConfigSources& sources) {
  std::vector<ConfigLayer> layers;
  layers.push_back(ConfigLayer{root, std::string(source_name)});
  return LoadConfigFromLayers(layers, sources);
}

Result<Config> LoadConfigFromText(std::string_view text, ConfigFormat format,
                                  const ConfigSources& sources, std::string_view source_name) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ParseConfigText(text, format, source_name));
  return LoadConfigFromTree(root, source_name, sources);
}

Result<Config> LoadConfig(const ConfigSources& sources) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<ConfigLayer> layers,
                          ReadConfigLayers(sources.paths, sources.model_path));
  return LoadConfigFromLayers(layers, sources);
}

std::string_view DeviceTypeName(DeviceType type) {
  return type == DeviceType::kCpu ? "cpu" : "cuda";
}

}  // namespace sluice
