#include "engine/config/config.h"

#include <unistd.h>

#include "engine/config/config_stages.h"

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

}  // namespace

Result<Config> LoadConfigFromTree(const ConfigNode& root, std::string_view source_name,
                                  const ConfigSources& sources) {
  Config config;
  config.source_file = std::string(source_name);
  config.world_size = sources.world_size;
  config.dp_world_size = sources.world_size;
  SLUICE_RETURN_IF_ERROR(ApplyConfigDocument(root, source_name, &config.values, &config.notes));
  SLUICE_RETURN_IF_ERROR(ApplyEnvOverrides(sources.env ? *sources.env : ProcessEnvironment(),
                                           &config.values, &config.notes));
  SLUICE_RETURN_IF_ERROR(ApplySetOverrides(sources.set_overrides, &config.values, &config.notes));
  ResolveContext context;
  context.world_size = sources.world_size;
  context.available_host_memory = sources.available_host_memory;
  context.source_name = std::string(source_name);
  SLUICE_RETURN_IF_ERROR(ResolveConfigValues(context, &config.values, &config.notes));
  BuildConfigSections(config.values, &config);
  return config;
}

Result<Config> LoadConfigFromText(std::string_view text, ConfigFormat format,
                                  const ConfigSources& sources) {
  std::string name = sources.path.empty() ? std::string("<config>") : sources.path;
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ParseConfigText(text, format, name));
  return LoadConfigFromTree(root, name, sources);
}

Result<Config> LoadConfig(const ConfigSources& sources) {
  ConfigNode root;  // no file: defaults and overrides only
  if (!sources.path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(root, ReadConfigFile(sources.path));
  }
  return LoadConfigFromTree(root, sources.path, sources);
}

std::string_view OffloadDeviceName(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "?";
}

std::string_view DeviceTypeName(DeviceType type) {
  return type == DeviceType::kCpu ? "cpu" : "cuda";
}

}  // namespace sluice
