// The settings registry: every configurable value of a program declared once, with its dotted
// path, type, default, one-line doc, allowed range and environment override. Parsers, help text
// and run records are produced from the registry, so they cannot drift apart.
//
//   SettingsRegistry r("SLUICE_CFG_");
//   r.AddSection("zero_optimization", "ZeRO partitioning");
//   r.Add("zero_optimization.stage", SettingType::kInt, "ZeRO stage").Default(int64_t{0}).Range(0,
//   3);
//
// Environment override rule: the prefix, then the path upper-cased with each '.' written as "__"
// (zero_optimization.stage -> SLUICE_CFG_ZERO_OPTIMIZATION__STAGE). Keys never contain "__", so
// the mapping is reversible.
//
// This layer knows nothing of file formats or of which program uses it; SettingValues holds one
// resolved value per setting together with where it came from, and writes the run record.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/status.h"

namespace sluice {

enum class SettingType {
  kBool,
  kInt,
  kFloat,
  kString,
  kSize,  // bytes, stored as int64_t
  kEnum,  // one of SettingSpec::allowed, stored as its canonical spelling
  kStringList,
  kFloatList,  // e.g. Adam betas
};
std::string_view SettingTypeName(SettingType type);

// monostate = no value (an optional setting left unset).
using SettingValue = std::variant<std::monostate, bool, int64_t, double, std::string,
                                  std::vector<std::string>, std::vector<double>>;

enum class DefaultKind {
  kValue,     // default_value applies
  kUnset,     // optional: no value unless given
  kRequired,  // must be given
  kDerived,   // computed from other settings (default_note says how)
};

// Where a resolved value came from, in increasing precedence for the first four.
enum class ValueSource { kDefault, kFile, kEnv, kSet, kDerived };
std::string_view ValueSourceName(ValueSource source);  // default, file, env, --set, derived

struct SettingSpec {
  std::string path;  // dotted: "zero_optimization.offload_optimizer.pin_memory"
  SettingType type = SettingType::kString;
  std::string doc;  // one line
  DefaultKind default_kind = DefaultKind::kValue;
  SettingValue default_value;
  std::string default_note;  // for kDerived/kUnset/kRequired: what happens when not given
  std::optional<double>
      min;  // numeric and size settings (size: bytes); list elements for kFloatList
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<std::string> allowed;  // kEnum: canonical spellings
  bool case_insensitive = false;     // kEnum: match allowed values ignoring case
  size_t list_size = 0;              // kFloatList/kStringList: exact length, 0 = any
  bool accepts_auto = false;         // the string "auto" asks for the value to be resolved
  std::string auto_note;             // what "auto" resolves to
  bool auto_at_run_time = false;     // "auto" stays in the config; the engine resolves it

  std::string env_var;  // filled by the registry
};

class SettingsRegistry;

// Fluent declaration of one setting; returned by SettingsRegistry::Add.
class SettingBuilder {
 public:
  SettingBuilder(SettingsRegistry* registry, size_t index) : registry_(registry), index_(index) {}
  SettingBuilder& Default(SettingValue value);
  SettingBuilder& Unset(std::string note);
  SettingBuilder& Required(std::string note);
  SettingBuilder& Derived(std::string note);
  SettingBuilder& Min(double min, bool exclusive = false);
  SettingBuilder& Max(double max, bool exclusive = false);
  SettingBuilder& Range(double min, double max) { return Min(min).Max(max); }
  SettingBuilder& Allowed(std::vector<std::string> values, bool case_insensitive = false);
  SettingBuilder& ListSize(size_t size);
  SettingBuilder& Auto(std::string note);
  // "auto" that the config leaves unresolved for the engine to measure when it runs.
  SettingBuilder& AutoAtRunTime(std::string note);

 private:
  SettingSpec& spec();
  SettingsRegistry* registry_;
  size_t index_;
};

class SettingsRegistry {
 public:
  explicit SettingsRegistry(std::string env_prefix) : env_prefix_(std::move(env_prefix)) {}
  SettingsRegistry(const SettingsRegistry&) = delete;
  SettingsRegistry& operator=(const SettingsRegistry&) = delete;

  // Declares a section (a node with children) for help output; sections are also implied by
  // the paths of their settings.
  void AddSection(std::string path, std::string doc);
  // Declares a setting; CHECK-fails on a duplicate path or a path under an existing setting.
  SettingBuilder Add(std::string path, SettingType type, std::string doc);

  const SettingSpec* Find(std::string_view path) const;
  const SettingSpec& Get(std::string_view path) const;  // CHECK-fails when absent
  bool IsSection(std::string_view path) const;
  std::string SectionDoc(std::string_view path) const;
  // Names (last path segment) of the settings and sections directly under `section` ("" = top).
  std::vector<std::string> ChildNames(std::string_view section) const;
  // Settings in declaration order.
  const std::deque<SettingSpec>& settings() const { return settings_; }

  const std::string& env_prefix() const { return env_prefix_; }
  std::string EnvVarName(std::string_view path) const;
  // The path an environment variable name overrides, or nullopt if it lacks the prefix.
  std::optional<std::string> PathFromEnvVar(std::string_view name) const;

  // Checks a typed value against the setting's type, range, allowed values and list length.
  // Messages name the key, the value and what is allowed.
  Status Validate(const SettingSpec& spec, const SettingValue& value) const;

 private:
  friend class SettingBuilder;
  std::string env_prefix_;
  std::deque<SettingSpec> settings_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> sections_;  // path -> doc ("" if implied)
};

// "a.b.c" -> "a.b" ("" at the top level) and -> "c".
std::string_view SettingParentPath(std::string_view path);
std::string_view SettingLeafName(std::string_view path);

// Matches `text` against an enum setting's allowed values; returns the canonical spelling.
std::optional<std::string> MatchEnumValue(const SettingSpec& spec, std::string_view text);

// Renders a value for messages, help and text output: true, 3, 0.001, "text", [0.9, 0.999].
std::string FormatSettingValue(const SettingValue& value);
std::string DescribeAllowed(const SettingSpec& spec);  // "0 to 3", "one of: cpu, cuda", ...
std::string DescribeDefault(const SettingSpec& spec);  // "0", "derived: ...", "required: ..."
nlohmann::json SettingValueToJson(const SettingValue& value);

// One resolved value per setting of a registry, with its source and a note ("auto -> 8", ...).
struct SettingEntry {
  SettingValue value;
  ValueSource source = ValueSource::kDefault;
  bool is_auto = false;  // "auto" was given and is not resolved yet
  std::string origin;    // where it was given: "file.yaml:3:5", "env SLUICE_CFG_X", "--set x=1"
  std::string note;      // how it was resolved or derived
};

class SettingValues {
 public:
  // Starts with every default applied (kValue settings) and the others unset.
  explicit SettingValues(const SettingsRegistry& registry);

  const SettingsRegistry& registry() const { return *registry_; }
  const SettingEntry& entry(std::string_view path) const;  // CHECK-fails on an unknown path
  // Given explicitly with a concrete value (file, env or --set; not "auto").
  bool IsGiven(std::string_view path) const;
  bool IsAuto(std::string_view path) const { return entry(path).is_auto; }
  bool HasValue(std::string_view path) const;

  void Set(std::string_view path, SettingValue value, ValueSource source, std::string origin = "",
           std::string note = "");
  void SetAuto(std::string_view path, ValueSource source, std::string origin);
  // Resolves an "auto" or derived value, keeping the source of the "auto" if there was one.
  void Resolve(std::string_view path, SettingValue value, std::string note);

  // Typed access; CHECK-fails on a type mismatch or an unset value (a programmer error: the
  // resolution step guarantees values). Every read is remembered for UnreadPaths(), so
  // concurrent reads from several threads need external locking; the engine reads the typed
  // Config built from these values instead.
  bool GetBool(std::string_view path) const;
  int64_t GetInt(std::string_view path) const;  // also kSize
  double GetFloat(std::string_view path) const;
  const std::string& GetString(std::string_view path) const;  // also kEnum
  const std::vector<double>& GetFloatList(std::string_view path) const;
  const std::vector<std::string>& GetStringList(std::string_view path) const;
  std::optional<int64_t> FindInt(std::string_view path) const;
  std::optional<double> FindFloat(std::string_view path) const;
  std::optional<std::string> FindString(std::string_view path) const;

  // Paths of settings never read through a getter (lets tests prove every setting is consumed).
  std::vector<std::string> UnreadPaths() const;

  // {"path": {"value": v, "source": "file", "note": "..."}, ...} for every setting, in
  // registry order (nlohmann::ordered_json keeps it).
  nlohmann::ordered_json ToRecordJson() const;
  // The values as a nested object that can be read back as a config; unset settings omitted.
  nlohmann::ordered_json ToNestedJson() const;

 private:
  const SettingValue& Value(std::string_view path, SettingType expected, SettingType also) const;
  const SettingsRegistry* registry_;
  std::map<std::string, SettingEntry, std::less<>> entries_;
  mutable std::set<std::string, std::less<>> read_;
};

}  // namespace sluice
