#include "runtime/settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "runtime/ascii_case.h"

namespace sluice {
namespace {

std::string FormatNumber(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    return fmt::format("{}", static_cast<int64_t>(value));
  }
  return fmt::format("{}", value);
}

// Shortest round-trip form that still reads as a float: 1.0, 0.001, 1e-08.
std::string FormatFloat(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

bool TypeHolds(SettingType type, const SettingValue& value) {
  switch (type) {
    case SettingType::kBool:
      return std::holds_alternative<bool>(value);
    case SettingType::kInt:
    case SettingType::kSize:
      return std::holds_alternative<int64_t>(value);
    case SettingType::kFloat:
      return std::holds_alternative<double>(value);
    case SettingType::kString:
    case SettingType::kEnum:
      return std::holds_alternative<std::string>(value);
    case SettingType::kStringList:
      return std::holds_alternative<std::vector<std::string>>(value);
    case SettingType::kFloatList:
      return std::holds_alternative<std::vector<double>>(value);
  }
  return false;
}

bool InRange(const SettingSpec& spec, double v) {
  if (spec.min && (spec.min_exclusive ? v <= *spec.min : v < *spec.min)) return false;
  if (spec.max && (spec.max_exclusive ? v >= *spec.max : v > *spec.max)) return false;
  return true;
}

std::string DescribeRange(const SettingSpec& spec) {
  if (spec.min && spec.max && !spec.min_exclusive && !spec.max_exclusive) {
    return fmt::format("{} to {}", FormatNumber(*spec.min), FormatNumber(*spec.max));
  }
  std::vector<std::string> parts;
  if (spec.min)
    parts.push_back(fmt::format("{} {}", spec.min_exclusive ? ">" : ">=", FormatNumber(*spec.min)));
  if (spec.max)
    parts.push_back(fmt::format("{} {}", spec.max_exclusive ? "<" : "<=", FormatNumber(*spec.max)));
  return fmt::format("{}", fmt::join(parts, " and "));
}

}  // namespace

std::string_view SettingParentPath(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::string_view SettingLeafName(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string_view SettingTypeName(SettingType type) {
  switch (type) {
    case SettingType::kBool:
      return "bool";
    case SettingType::kInt:
      return "int";
    case SettingType::kFloat:
      return "float";
    case SettingType::kString:
      return "string";
    case SettingType::kSize:
      return "size";
    case SettingType::kEnum:
      return "enum";
    case SettingType::kStringList:
      return "string list";
    case SettingType::kFloatList:
      return "float list";
  }
  return "?";
}

std::string_view ValueSourceName(ValueSource source) {
  switch (source) {
    case ValueSource::kDefault:
      return "default";
    case ValueSource::kFile:
      return "file";
    case ValueSource::kEnv:
      return "env";
    case ValueSource::kSet:
      return "--set";
    case ValueSource::kDerived:
      return "derived";
  }
  return "?";
}

// ---- SettingBuilder ----

SettingSpec& SettingBuilder::spec() { return registry_->settings_[index_]; }

SettingBuilder& SettingBuilder::Default(SettingValue value) {
  SLUICE_CHECK(TypeHolds(spec().type, value))
      << "default of " << spec().path << " has the wrong type";
  spec().default_kind = DefaultKind::kValue;
  spec().default_value = std::move(value);
  return *this;
}

SettingBuilder& SettingBuilder::Unset(std::string note) {
  spec().default_kind = DefaultKind::kUnset;
  spec().default_value = std::monostate();
  spec().default_note = std::move(note);
  return *this;
}

SettingBuilder& SettingBuilder::Required(std::string note) {
  spec().default_kind = DefaultKind::kRequired;
  spec().default_value = std::monostate();
  spec().default_note = std::move(note);
  return *this;
}

SettingBuilder& SettingBuilder::Derived(std::string note) {
  spec().default_kind = DefaultKind::kDerived;
  spec().default_value = std::monostate();
  spec().default_note = std::move(note);
  return *this;
}

SettingBuilder& SettingBuilder::Min(double min, bool exclusive) {
  spec().min = min;
  spec().min_exclusive = exclusive;
  return *this;
}

SettingBuilder& SettingBuilder::Max(double max, bool exclusive) {
  spec().max = max;
  spec().max_exclusive = exclusive;
  return *this;
}

SettingBuilder& SettingBuilder::Allowed(std::vector<std::string> values, bool case_insensitive) {
  SLUICE_CHECK(spec().type == SettingType::kEnum) << spec().path << " is not an enum";
  spec().allowed = std::move(values);
  spec().case_insensitive = case_insensitive;
  return *this;
}

SettingBuilder& SettingBuilder::ListSize(size_t size) {
  spec().list_size = size;
  return *this;
}

SettingBuilder& SettingBuilder::Auto(std::string note) {
  spec().accepts_auto = true;
  spec().auto_note = std::move(note);
  return *this;
}

SettingBuilder& SettingBuilder::AutoAtRunTime(std::string note) {
  spec().auto_at_run_time = true;
  return Auto(std::move(note));
}

// ---- SettingsRegistry ----

void SettingsRegistry::AddSection(std::string path, std::string doc) {
  SLUICE_CHECK(index_.find(path) == index_.end()) << path << " is already a setting";
  for (std::string_view p = path; !p.empty(); p = SettingParentPath(p))
    sections_.emplace(std::string(p), "");
  sections_[path] = std::move(doc);
}

SettingBuilder SettingsRegistry::Add(std::string path, SettingType type, std::string doc) {
  SLUICE_CHECK(!path.empty() && path.find("__") == std::string::npos &&
               path.find_first_of(" \t") == std::string::npos)
      << "bad setting path '" << path << "'";
  SLUICE_CHECK(index_.find(path) == index_.end()) << "setting " << path << " declared twice";
  SLUICE_CHECK(sections_.find(path) == sections_.end()) << path << " is already a section";
  for (std::string_view p = SettingParentPath(path); !p.empty(); p = SettingParentPath(p)) {
    SLUICE_CHECK(index_.find(p) == index_.end()) << path << " is under the setting " << p;
    sections_.emplace(std::string(p), "");
  }
  SettingSpec spec;
  spec.path = path;
  spec.type = type;
  spec.doc = std::move(doc);
  spec.env_var = EnvVarName(path);
  index_.emplace(path, settings_.size());
  settings_.push_back(std::move(spec));
  return SettingBuilder(this, settings_.size() - 1);
}

const SettingSpec* SettingsRegistry::Find(std::string_view path) const {
  auto it = index_.find(path);
  return it == index_.end() ? nullptr : &settings_[it->second];
}

const SettingSpec& SettingsRegistry::Get(std::string_view path) const {
  const SettingSpec* spec = Find(path);
  SLUICE_CHECK(spec != nullptr) << "unknown setting " << std::string(path);
  return *spec;
}

bool SettingsRegistry::IsSection(std::string_view path) const {
  return sections_.find(path) != sections_.end();
}

std::string SettingsRegistry::SectionDoc(std::string_view path) const {
  auto it = sections_.find(path);
  return it == sections_.end() ? std::string() : it->second;
}

std::vector<std::string> SettingsRegistry::ChildNames(std::string_view section) const {
  std::vector<std::string> names;
  auto add = [&](std::string_view path) {
    if (SettingParentPath(path) != section) return;
    std::string name(SettingLeafName(path));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  for (const auto& [path, doc] : sections_) add(path);
  for (const SettingSpec& spec : settings_) add(spec.path);
  return names;
}

std::string SettingsRegistry::EnvVarName(std::string_view path) const {
  std::string name = env_prefix_;
  for (char c : path) {
    if (c == '.') {
      name += "__";
    } else {
      name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  return name;
}

std::optional<std::string> SettingsRegistry::PathFromEnvVar(std::string_view name) const {
  if (name.size() <= env_prefix_.size() || name.substr(0, env_prefix_.size()) != env_prefix_) {
    return std::nullopt;
  }
  std::string path;
  std::string_view rest = name.substr(env_prefix_.size());
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '_' && i + 1 < rest.size() && rest[i + 1] == '_') {
      path += '.';
      ++i;
    } else {
      path += static_cast<char>(std::tolower(static_cast<unsigned char>(rest[i])));
    }
  }
  return path;
}

Status SettingsRegistry::Validate(const SettingSpec& spec, const SettingValue& value) const {
  if (std::holds_alternative<std::monostate>(value)) return OkStatus();
  if (!TypeHolds(spec.type, value)) {
    return InvalidArgumentError("{}: {} is not a valid {}", spec.path, FormatSettingValue(value),
                                SettingTypeName(spec.type));
  }
  switch (spec.type) {
    case SettingType::kInt:
    case SettingType::kSize: {
      int64_t v = std::get<int64_t>(value);
      if (!InRange(spec, static_cast<double>(v))) {
        return OutOfRangeError("{}: {} is out of range: allowed {}", spec.path, v,
                               DescribeAllowed(spec));
      }
      break;
    }
    case SettingType::kFloat: {
      double v = std::get<double>(value);
      if (!std::isfinite(v) || !InRange(spec, v)) {
        return OutOfRangeError("{}: {} is out of range: allowed {}", spec.path, FormatNumber(v),
                               DescribeAllowed(spec));
      }
      break;
    }
    case SettingType::kEnum: {
      const std::string& v = std::get<std::string>(value);
      if (std::find(spec.allowed.begin(), spec.allowed.end(), v) == spec.allowed.end()) {
        return InvalidArgumentError("{}: \"{}\" is not allowed: {}", spec.path, v,
                                    DescribeAllowed(spec));
      }
      break;
    }
    case SettingType::kFloatList: {
      const auto& v = std::get<std::vector<double>>(value);
      if (spec.list_size != 0 && v.size() != spec.list_size) {
        return InvalidArgumentError("{}: {} has {} elements: expected a list of {} numbers",
                                    spec.path, FormatSettingValue(value), v.size(), spec.list_size);
      }
      for (double x : v) {
        if (!std::isfinite(x) || !InRange(spec, x)) {
          return OutOfRangeError("{}: element {} of {} is out of range: each element {}", spec.path,
                                 FormatNumber(x), FormatSettingValue(value), DescribeRange(spec));
        }
      }
      break;
    }
    case SettingType::kStringList: {
      const auto& v = std::get<std::vector<std::string>>(value);
      if (spec.list_size != 0 && v.size() != spec.list_size) {
        return InvalidArgumentError("{}: {} has {} elements: expected a list of {} strings",
                                    spec.path, FormatSettingValue(value), v.size(), spec.list_size);
      }
      break;
    }
    case SettingType::kBool:
    case SettingType::kString:
      break;
  }
  return OkStatus();
}

std::optional<std::string> MatchEnumValue(const SettingSpec& spec, std::string_view text) {
  for (const std::string& allowed : spec.allowed) {
    if (allowed == text) return allowed;
  }
  if (spec.case_insensitive) {
    std::string lower = AsciiLower(text);
    for (const std::string& allowed : spec.allowed) {
      if (AsciiLower(allowed) == lower) return allowed;
    }
  }
  return std::nullopt;
}

std::string FormatSettingValue(const SettingValue& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "~"; }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(int64_t v) const { return fmt::format("{}", v); }
    std::string operator()(double v) const { return FormatFloat(v); }
    std::string operator()(const std::string& v) const { return fmt::format("\"{}\"", v); }
    std::string operator()(const std::vector<std::string>& v) const {
      std::vector<std::string> quoted;
      for (const auto& s : v) quoted.push_back(fmt::format("\"{}\"", s));
      return fmt::format("[{}]", fmt::join(quoted, ", "));
    }
    std::string operator()(const std::vector<double>& v) const {
      std::vector<std::string> items;
      for (double x : v) items.push_back(FormatFloat(x));
      return fmt::format("[{}]", fmt::join(items, ", "));
    }
  };
  return std::visit(Visitor{}, value);
}

std::string DescribeAllowed(const SettingSpec& spec) {
  switch (spec.type) {
    case SettingType::kBool:
      return "true or false";
    case SettingType::kEnum: {
      std::string text = fmt::format("one of: {}", fmt::join(spec.allowed, ", "));
      if (spec.case_insensitive) text += " (any case)";
      return text;
    }
    case SettingType::kInt:
    case SettingType::kFloat:
    case SettingType::kSize: {
      std::string what = spec.type == SettingType::kInt     ? "an integer"
                         : spec.type == SettingType::kFloat ? "a number"
                                                            : "a size in bytes";
      if (!spec.min && !spec.max) return what;
      return fmt::format("{} {}", what, DescribeRange(spec));
    }
    case SettingType::kFloatList: {
      std::string text = spec.list_size ? fmt::format("a list of {} numbers", spec.list_size)
                                        : std::string("a list of numbers");
      if (spec.min || spec.max) text += fmt::format(", each {}", DescribeRange(spec));
      return text;
    }
    case SettingType::kStringList:
      return spec.list_size ? fmt::format("a list of {} strings", spec.list_size)
                            : std::string("a list of strings");
    case SettingType::kString:
      return "a string";
  }
  return "";
}

std::string DescribeDefault(const SettingSpec& spec) {
  switch (spec.default_kind) {
    case DefaultKind::kValue:
      return FormatSettingValue(spec.default_value);
    case DefaultKind::kUnset:
      return fmt::format("unset: {}", spec.default_note);
    case DefaultKind::kRequired:
      return fmt::format("required: {}", spec.default_note);
    case DefaultKind::kDerived:
      return fmt::format("derived: {}", spec.default_note);
  }
  return "";
}

nlohmann::json SettingValueToJson(const SettingValue& value) {
  struct Visitor {
    nlohmann::json operator()(std::monostate) const { return nullptr; }
    nlohmann::json operator()(bool v) const { return v; }
    nlohmann::json operator()(int64_t v) const { return v; }
    nlohmann::json operator()(double v) const { return v; }
    nlohmann::json operator()(const std::string& v) const { return v; }
    nlohmann::json operator()(const std::vector<std::string>& v) const { return v; }
    nlohmann::json operator()(const std::vector<double>& v) const { return v; }
  };
  return std::visit(Visitor{}, value);
}

// ---- SettingValues ----

SettingValues::SettingValues(const SettingsRegistry& registry) : registry_(&registry) {
  for (const SettingSpec& spec : registry.settings()) {
    SettingEntry entry;
    if (spec.default_kind == DefaultKind::kValue) entry.value = spec.default_value;
    entries_.emplace(spec.path, std::move(entry));
  }
}

const SettingEntry& SettingValues::entry(std::string_view path) const {
  auto it = entries_.find(path);
  SLUICE_CHECK(it != entries_.end()) << "unknown setting " << std::string(path);
  return it->second;
}

bool SettingValues::IsGiven(std::string_view path) const {
  const SettingEntry& e = entry(path);
  return !e.is_auto &&
         (e.source == ValueSource::kFile || e.source == ValueSource::kEnv ||
          e.source == ValueSource::kSet) &&
         !std::holds_alternative<std::monostate>(e.value);
}

bool SettingValues::HasValue(std::string_view path) const {
  const SettingEntry& e = entry(path);
  return !e.is_auto && !std::holds_alternative<std::monostate>(e.value);
}

void SettingValues::Set(std::string_view path, SettingValue value, ValueSource source,
                        std::string origin, std::string note) {
  auto it = entries_.find(path);
  SLUICE_CHECK(it != entries_.end()) << "unknown setting " << std::string(path);
  it->second = SettingEntry{std::move(value), source, false, std::move(origin), std::move(note)};
}

void SettingValues::SetAuto(std::string_view path, ValueSource source, std::string origin) {
  auto it = entries_.find(path);
  SLUICE_CHECK(it != entries_.end()) << "unknown setting " << std::string(path);
  it->second = SettingEntry{std::monostate(), source, true, std::move(origin), ""};
}

void SettingValues::Resolve(std::string_view path, SettingValue value, std::string note) {
  auto it = entries_.find(path);
  SLUICE_CHECK(it != entries_.end()) << "unknown setting " << std::string(path);
  SettingEntry& e = it->second;
  if (!e.is_auto) e.source = ValueSource::kDerived;
  e.value = std::move(value);
  e.note = e.is_auto ? fmt::format("auto -> {}{}{}", FormatSettingValue(e.value),
                                   note.empty() ? "" : ": ", note)
                     : std::move(note);
  e.is_auto = false;
}

const SettingValue& SettingValues::Value(std::string_view path, SettingType expected,
                                         SettingType also) const {
  const SettingSpec& spec = registry_->Get(path);
  SLUICE_CHECK(spec.type == expected || spec.type == also)
      << std::string(path) << " is a " << std::string(SettingTypeName(spec.type));
  read_.insert(std::string(path));
  return entry(path).value;
}

bool SettingValues::GetBool(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kBool, SettingType::kBool);
  SLUICE_CHECK(std::holds_alternative<bool>(v)) << std::string(path) << " has no value";
  return std::get<bool>(v);
}

int64_t SettingValues::GetInt(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kInt, SettingType::kSize);
  SLUICE_CHECK(std::holds_alternative<int64_t>(v)) << std::string(path) << " has no value";
  return std::get<int64_t>(v);
}

double SettingValues::GetFloat(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kFloat, SettingType::kFloat);
  SLUICE_CHECK(std::holds_alternative<double>(v)) << std::string(path) << " has no value";
  return std::get<double>(v);
}

const std::string& SettingValues::GetString(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kString, SettingType::kEnum);
  SLUICE_CHECK(std::holds_alternative<std::string>(v)) << std::string(path) << " has no value";
  return std::get<std::string>(v);
}

const std::vector<double>& SettingValues::GetFloatList(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kFloatList, SettingType::kFloatList);
  SLUICE_CHECK(std::holds_alternative<std::vector<double>>(v))
      << std::string(path) << " has no value";
  return std::get<std::vector<double>>(v);
}

const std::vector<std::string>& SettingValues::GetStringList(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kStringList, SettingType::kStringList);
  SLUICE_CHECK(std::holds_alternative<std::vector<std::string>>(v))
      << std::string(path) << " has no value";
  return std::get<std::vector<std::string>>(v);
}

std::optional<int64_t> SettingValues::FindInt(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kInt, SettingType::kSize);
  if (!std::holds_alternative<int64_t>(v)) return std::nullopt;
  return std::get<int64_t>(v);
}

std::optional<double> SettingValues::FindFloat(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kFloat, SettingType::kFloat);
  if (!std::holds_alternative<double>(v)) return std::nullopt;
  return std::get<double>(v);
}

std::optional<std::string> SettingValues::FindString(std::string_view path) const {
  const SettingValue& v = Value(path, SettingType::kString, SettingType::kEnum);
  if (!std::holds_alternative<std::string>(v)) return std::nullopt;
  return std::get<std::string>(v);
}

std::vector<std::string> SettingValues::UnreadPaths() const {
  std::vector<std::string> unread;
  for (const SettingSpec& spec : registry_->settings()) {
    if (read_.find(spec.path) == read_.end()) unread.push_back(spec.path);
  }
  return unread;
}

nlohmann::ordered_json SettingValues::ToRecordJson() const {
  nlohmann::ordered_json record = nlohmann::ordered_json::object();
  for (const SettingSpec& spec : registry_->settings()) {
    const SettingEntry& e = entry(spec.path);
    nlohmann::ordered_json item;
    item["value"] = e.is_auto ? nlohmann::json("auto") : SettingValueToJson(e.value);
    item["source"] = ValueSourceName(e.source);
    if (!e.note.empty()) item["note"] = e.note;
    record[spec.path] = std::move(item);
  }
  return record;
}

nlohmann::ordered_json SettingValues::ToNestedJson() const {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  for (const SettingSpec& spec : registry_->settings()) {
    const SettingEntry& e = entry(spec.path);
    if (!e.is_auto && std::holds_alternative<std::monostate>(e.value)) continue;
    nlohmann::ordered_json* node = &root;
    std::string_view rest = spec.path;
    for (size_t dot = rest.find('.'); dot != std::string_view::npos; dot = rest.find('.')) {
      node = &(*node)[std::string(rest.substr(0, dot))];
      rest = rest.substr(dot + 1);
    }
    (*node)[std::string(rest)] = e.is_auto ? nlohmann::json("auto") : SettingValueToJson(e.value);
  }
  return root;
}

}  // namespace sluice
