// The config schema: the one table of Sluice's settings (DeepSpeed's keys with DeepSpeed's code
// defaults, plus Sluice's model/data/device/run sections), and what Sluice knows about the other
// DeepSpeed keys: aliases, deprecated spellings, and keys it does not support yet.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/logging.h"
#include "runtime/settings.h"

namespace sluice {

// Every setting, declared once in config_schema.cpp. Environment prefix "SLUICE_CFG_".
const SettingsRegistry& ConfigRegistry();

// Another name for a key or section (DeepSpeed's pydantic aliases, deprecated spellings, and
// aio.thread_count, which DeepSpeed silently ignores and Sluice honours).
struct ConfigKeyAlias {
  std::string_view path;
  std::string_view canonical;
  LogLevel level;        // how loudly using it is reported
  std::string_view why;  // appended to the log line
};
const ConfigKeyAlias* FindConfigAlias(std::string_view path);

// A DeepSpeed key that Sluice does not support yet. `same_as_sluice` lists the values under
// which DeepSpeed behaves as Sluice always does (usually DeepSpeed's default); such a value is
// accepted and reported at info level, any other value is an error. For a section,
// "enabled=false" accepts the section when it says `enabled: false`.
struct UnsupportedConfigKey {
  std::string_view path;
  bool is_section;
  std::vector<std::string_view> same_as_sluice;
  std::string_view note;  // extra advice; may be empty
  // Why a value of same_as_sluice describes Sluice, for the info line ("Sluice reduces gradients
  // in fp32"); empty: the value is DeepSpeed's default, which Sluice always does.
  std::string_view accepted_why = {};
};
const UnsupportedConfigKey* FindUnsupportedConfigKey(std::string_view path);

// A DeepSpeed key that DeepSpeed itself ignores (it never reads it, or reads it and never uses
// it, or it has no effect with the rest of the config): accepted with a warning that says so, as
// DeepSpeed runs such a config. A value in `quiet_values` (one that describes what Sluice does)
// is reported at info level instead.
struct IgnoredConfigKey {
  std::string_view path;  // a key or a whole section
  std::string_view why;
  std::vector<std::string_view> quiet_values = {};
};
const IgnoredConfigKey* FindIgnoredConfigKey(std::string_view path);

// A DeepSpeed value of an enum setting that Sluice does not support (optimizer "Lamb", ...):
// returns a note such as "a DeepSpeed optimizer", or nullptr.
const char* UnsupportedConfigValue(std::string_view path, std::string_view value);

// Names known under a section (settings, sections, aliases and unsupported DeepSpeed keys), for
// "did you mean" suggestions.
std::vector<std::string> KnownConfigChildNames(std::string_view section);
// Full paths of known keys whose last segment is `name` (a key written in the wrong section).
std::vector<std::string> KnownConfigPathsNamed(std::string_view name);

// The scheduler.params keys a scheduler type takes, as its DeepSpeed constructor does.
const std::vector<std::string>& SchedulerParamNames(std::string_view scheduler_type);

}  // namespace sluice
