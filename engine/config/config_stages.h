// The stages LoadConfig runs, in order: apply the file, then the environment, then --set (each
// checked against the schema), then resolve "auto" and derived values and check cross-key rules,
// then fill the typed Config. Split out so each stage has its own file and tests.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/config/config_tree.h"
#include "runtime/settings.h"
#include "runtime/status.h"

namespace sluice {

struct Config;

// Applies a parsed document. `source_name` (the file) prefixes messages with file:line:col.
// Each Apply* stops at the first key it cannot apply, or, given `problems`, appends that key's
// error there and applies the rest (config check --all).
Status ApplyConfigDocument(const ConfigNode& root, std::string_view source_name,
                           SettingValues* values, std::vector<std::string>* notes,
                           std::vector<Status>* problems = nullptr);
// Applies SLUICE_CFG_* variables from NAME=VALUE pairs (others are ignored), in sorted order.
Status ApplyEnvOverrides(const std::vector<std::pair<std::string, std::string>>& env,
                         SettingValues* values, std::vector<std::string>* notes,
                         std::vector<Status>* problems = nullptr);
// Applies "key=value" overrides in order.
Status ApplySetOverrides(const std::vector<std::string>& overrides, SettingValues* values,
                         std::vector<std::string>* notes, std::vector<Status>* problems = nullptr);

struct ResolveContext {
  int world_size = 1;
  std::optional<int64_t> available_host_memory;  // nullopt: read /proc/meminfo
  std::string source_name;                       // prefixes cross-key messages
};
// Resolves "auto" and derived values, runs DeepSpeed's batch-size inference and checks every
// rule that involves more than one key.
Status ResolveConfigValues(const ResolveContext& context, SettingValues* values,
                           std::vector<std::string>* notes);

// Fills the typed sections from fully resolved values. Fails (OutOfRange, naming the setting and
// where it was given) when a value does not fit the int the engine keeps it in.
Status BuildConfigSections(const SettingValues& values, Config* config);

// Edit distance, for "did you mean" suggestions (case-insensitive).
size_t ConfigKeyDistance(std::string_view a, std::string_view b);

}  // namespace sluice
