// Applying a document or an override to the setting values, key by key, against the schema:
// unknown keys, unsupported DeepSpeed keys, wrong types and out-of-range values stop here with a
// message that names the key (and file:line:col for files).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

#include "engine/config/config_schema.h"
#include "engine/config/config_stages.h"
#include "runtime/logging.h"
#include "runtime/size_format.h"

namespace sluice {
namespace {

std::string Join(std::string_view section, std::string_view key) {
  return section.empty() ? std::string(key) : fmt::format("{}.{}", section, key);
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsScalar(const ConfigNode& node) { return node.kind == ConfigNode::Kind::kScalar; }

// A scalar that may be read as a number: JSON numbers and YAML plain scalars.
bool IsNumeric(const ConfigNode& node) {
  return IsScalar(node) && (node.scalar_kind == ConfigNode::ScalarKind::kNumber ||
                            node.scalar_kind == ConfigNode::ScalarKind::kPlain);
}

std::optional<double> ParseDouble(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Integers as DeepSpeed accepts them: 500000000, 5e8, 1e9 (an integral float).
std::optional<int64_t> ParseInteger(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc() && end == text.data() + text.size()) return value;
  std::optional<double> d = ParseDouble(text);
  if (!d || *d != std::floor(*d) || std::fabs(*d) >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(*d);
}

std::optional<bool> ParseBool(const ConfigNode& node) {
  if (!IsScalar(node) || node.scalar_kind == ConfigNode::ScalarKind::kString ||
      node.scalar_kind == ConfigNode::ScalarKind::kNumber) {
    return std::nullopt;
  }
  if (node.text == "true" || node.text == "True" || node.text == "TRUE") return true;
  if (node.text == "false" || node.text == "False" || node.text == "FALSE") return false;
  return std::nullopt;
}

bool IsAutoNode(const ConfigNode& node) {
  return IsScalar(node) && node.scalar_kind != ConfigNode::ScalarKind::kNumber &&
         node.text == "auto";
}

struct ConvertedValue {
  bool is_null = false;
  bool is_auto = false;
  SettingValue value;
};

Result<SettingValue> ConvertScalarOrList(const SettingSpec& spec, const ConfigNode& node) {
  auto wrong = [&]() {
    return InvalidArgumentError("{}: expected {}, got {}", spec.path, DescribeAllowed(spec),
                                node.Describe());
  };
  switch (spec.type) {
    case SettingType::kBool: {
      std::optional<bool> b = ParseBool(node);
      if (!b) return wrong();
      return SettingValue(*b);
    }
    case SettingType::kInt: {
      if (!IsNumeric(node)) return wrong();
      std::optional<int64_t> v = ParseInteger(node.text);
      if (!v) {
        std::optional<double> d = ParseDouble(node.text);
        if (d && *d == std::floor(*d)) {
          return OutOfRangeError("{}: {} is out of range of a 64-bit integer: allowed {}",
                                 spec.path, node.text, DescribeAllowed(spec));
        }
        return wrong();
      }
      return SettingValue(*v);
    }
    case SettingType::kFloat: {
      if (!IsNumeric(node)) return wrong();
      std::optional<double> v = ParseDouble(node.text);
      if (!v) return wrong();
      return SettingValue(*v);
    }
    case SettingType::kSize: {
      if (!IsScalar(node) || node.scalar_kind == ConfigNode::ScalarKind::kBool) return wrong();
      Result<uint64_t> bytes = ParseByteSize(node.text);
      if (!bytes.ok()) {
        return InvalidArgumentError("{}: {}", spec.path, bytes.status().message());
      }
      if (*bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgumentError("{}: \"{}\" is too large", spec.path, node.text);
      }
      return SettingValue(static_cast<int64_t>(*bytes));
    }
    case SettingType::kString: {
      if (!IsScalar(node) || node.scalar_kind == ConfigNode::ScalarKind::kNumber ||
          node.scalar_kind == ConfigNode::ScalarKind::kBool) {
        return wrong();
      }
      return SettingValue(node.text);
    }
    case SettingType::kEnum: {
      if (!IsScalar(node) || node.scalar_kind == ConfigNode::ScalarKind::kBool) return wrong();
      if (std::optional<std::string> canonical = MatchEnumValue(spec, node.text)) {
        return SettingValue(*canonical);
      }
      if (const char* what = UnsupportedConfigValue(spec.path, node.text)) {
        return UnimplementedError("{}: \"{}\" is {} that Sluice does not support yet ({})",
                                  spec.path, node.text, what, DescribeAllowed(spec));
      }
      return InvalidArgumentError("{}: \"{}\" is not allowed: {}", spec.path, node.text,
                                  DescribeAllowed(spec));
    }
    case SettingType::kFloatList: {
      if (node.kind != ConfigNode::Kind::kSequence) return wrong();
      std::vector<double> list;
      for (const ConfigNode& item : node.items) {
        std::optional<double> v = IsNumeric(item) ? ParseDouble(item.text) : std::nullopt;
        if (!v) {
          return InvalidArgumentError("{}: expected {}, but an element is {}", spec.path,
                                      DescribeAllowed(spec), item.Describe());
        }
        list.push_back(*v);
      }
      return SettingValue(std::move(list));
    }
    case SettingType::kStringList: {
      if (node.kind != ConfigNode::Kind::kSequence) return wrong();
      std::vector<std::string> list;
      for (const ConfigNode& item : node.items) {
        if (!IsScalar(item)) {
          return InvalidArgumentError("{}: expected {}, but an element is {}", spec.path,
                                      DescribeAllowed(spec), item.Describe());
        }
        list.push_back(item.text);
      }
      return SettingValue(std::move(list));
    }
  }
  return wrong();
}

Result<ConvertedValue> Convert(const SettingsRegistry& registry, const SettingSpec& spec,
                               const ConfigNode& node) {
  ConvertedValue out;
  if (node.kind == ConfigNode::Kind::kNull) {
    out.is_null = true;
    return out;
  }
  if (IsAutoNode(node) && spec.type != SettingType::kString &&
      !(spec.type == SettingType::kEnum && MatchEnumValue(spec, "auto"))) {
    if (!spec.accepts_auto) {
      return InvalidArgumentError(
          "{}: \"auto\" cannot be resolved: nothing in the config defines this key; give {}",
          spec.path, DescribeAllowed(spec));
    }
    out.is_auto = true;
    return out;
  }
  SLUICE_ASSIGN_OR_RETURN(out.value, ConvertScalarOrList(spec, node));
  SLUICE_RETURN_IF_ERROR(registry.Validate(spec, out.value));
  return out;
}

// Whether `node` asks for exactly what Sluice does anyway (see UnsupportedConfigKey).
bool SameAsSluice(const UnsupportedConfigKey& key, const ConfigNode& node) {
  if (node.kind == ConfigNode::Kind::kNull) return true;
  for (std::string_view accepted : key.same_as_sluice) {
    if (accepted == "enabled=false") {
      if (node.kind != ConfigNode::Kind::kMap) continue;
      if (node.entries.empty()) return true;
      for (const ConfigNode::Entry& e : node.entries) {
        if (e.key == "enabled") {
          std::optional<bool> b = ParseBool(e.value);
          if (b.has_value() && !*b) return true;
        }
      }
      continue;
    }
    if (!IsScalar(node)) continue;
    if (accepted == "true" || accepted == "false") {
      std::optional<bool> b = ParseBool(node);
      if (b && *b == (accepted == "true")) return true;
      continue;
    }
    std::optional<double> want = ParseDouble(accepted);
    if (want) {
      std::optional<double> got = IsNumeric(node) ? ParseDouble(node.text) : std::nullopt;
      if (got && *got == *want) return true;
      continue;
    }
    // DeepSpeed lower-cases its dtype names ("FP32" is fp32).
    if (Lower(node.text) == Lower(accepted)) return true;
  }
  return false;
}

// A top-level key that only annotates the file ("_comment", "comment"): JSON has no comments,
// and DeepSpeed never looks at top-level keys it does not read.
bool IsCommentKey(std::string_view path) {
  if (path.find('.') != std::string_view::npos) return false;
  const std::string lower = Lower(path);
  return lower.starts_with('_') || lower == "comment" || lower == "comments";
}

std::string DescribeSameAsSluice(const UnsupportedConfigKey& key) {
  if (key.same_as_sluice.empty()) return "remove it";
  if (key.same_as_sluice.front() == "enabled=false")
    return "remove the section or set enabled: false";
  std::vector<std::string> values(key.same_as_sluice.begin(), key.same_as_sluice.end());
  return fmt::format("Sluice always behaves as {}: {}; remove the key or set it to that", key.path,
                     fmt::join(values, " or "));
}

class Applier {
 public:
  // `problems`: nullptr stops at the first key that cannot be applied; otherwise each such key's
  // error is appended there and the other keys are still applied (config check --all).
  Applier(ValueSource source, std::string origin_name, SettingValues* values,
          std::vector<std::string>* notes, std::vector<Status>* problems = nullptr)
      : source_(source),
        origin_name_(std::move(origin_name)),
        values_(values),
        notes_(notes),
        problems_(problems),
        registry_(values->registry()) {}

  Status ApplyMap(const ConfigNode& map, const std::string& section) {
    for (const ConfigNode::Entry& entry : map.entries) {
      Status status = ApplyKey(Join(section, entry.key), entry.value, entry.key_pos);
      if (status.ok()) continue;
      if (problems_ == nullptr) return status;
      problems_->push_back(std::move(status));
    }
    return OkStatus();
  }

  Status ApplyKey(std::string path, const ConfigNode& node, SourcePos pos) {
    std::string where = FormatSourcePos(origin_name_, pos);
    std::string written = path;
    if (const ConfigKeyAlias* alias = FindConfigAlias(path)) {
      Note(alias->level,
           fmt::format("{}: {} is read as {} ({})", where, path, alias->canonical, alias->why));
      path = std::string(alias->canonical);
    }
    SLUICE_ASSIGN_OR_RETURN(bool handled, ApplyDeprecated(path, node, where));
    if (handled) return OkStatus();

    if (registry_.IsSection(path)) {
      if (node.kind == ConfigNode::Kind::kNull) return OkStatus();
      if (node.kind != ConfigNode::Kind::kMap) {
        return InvalidArgumentError("{}: {} is a section: expected a mapping, got {}", where,
                                    written, node.Describe());
      }
      if (path == "optimizer") NoteRefusedOptimizer(node);
      return ApplyMap(node, path);
    }
    if (const SettingSpec* spec = registry_.Find(path)) {
      SLUICE_RETURN_IF_ERROR(Claim(path, written, where));
      Result<ConvertedValue> converted = Convert(registry_, *spec, node);
      if (!converted.ok()) {
        Status status = converted.status();
        return std::move(status).WithContext(where);
      }
      if (converted->is_null) return OkStatus();  // null keeps the default, as in DeepSpeed
      if (converted->is_auto) {
        values_->SetAuto(path, source_, where);
      } else {
        values_->Set(path, std::move(converted->value), source_, where);
      }
      return OkStatus();
    }
    if (const IgnoredConfigKey* key = FindIgnoredConfigKey(path)) {
      const bool quiet = std::any_of(
          key->quiet_values.begin(), key->quiet_values.end(), [&](std::string_view value) {
            return SameAsSluice(UnsupportedConfigKey{path, false, {value}, {}}, node);
          });
      Note(quiet ? LogLevel::kInfo : LogLevel::kWarn,
           fmt::format("{}: {} is ignored, as DeepSpeed ignores it: {}", where, path, key->why));
      return OkStatus();
    }
    if (const UnsupportedConfigKey* key = FindUnsupportedConfigKey(path)) {
      if (SameAsSluice(*key, node)) {
        if (key->accepted_why.empty()) {
          Note(LogLevel::kInfo,
               fmt::format("{}: DeepSpeed key {} is accepted: its value is what Sluice always does",
                           where, path));
        } else {
          Note(LogLevel::kInfo,
               fmt::format("{}: DeepSpeed key {} {} is accepted: {}", where, path,
                           node.kind == ConfigNode::Kind::kNull ? "null" : node.text,
                           key->accepted_why));
        }
        return OkStatus();
      }
      return UnimplementedError(
          "{}: known DeepSpeed key {} is not supported by Sluice yet ({}{}{})", where, path,
          DescribeSameAsSluice(*key), key->note.empty() ? "" : "; ", key->note);
    }
    if (!refused_optimizer_.empty() && path.starts_with("optimizer.params.")) {
      // The parameters of a DeepSpeed optimizer Sluice refuses (Lamb's max_coeff, ...): the
      // refusal of optimizer.type says it; they are not typos.
      return OkStatus();
    }
    if (IsCommentKey(path)) {
      Note(LogLevel::kInfo,
           fmt::format("{}: {} is read as a comment and ignored (DeepSpeed ignores top-level keys "
                       "it does not know)",
                       where, path));
      return OkStatus();
    }
    return UnknownKey(path, where);
  }

 private:
  void Note(LogLevel level, std::string text) {
    if (level >= LogLevel::kInfo) notes_->push_back(text);
    if (LogEnabled(level, "config")) LogMessage(level, "config", text);
  }

  // Remembers an optimizer.type that names a DeepSpeed optimizer Sluice does not have, before
  // its parameters are read (they may come first in the file).
  void NoteRefusedOptimizer(const ConfigNode& optimizer) {
    for (const ConfigNode::Entry& e : optimizer.entries) {
      if (e.key == "type" && IsScalar(e.value) &&
          UnsupportedConfigValue("optimizer.type", e.value.text) != nullptr) {
        refused_optimizer_ = e.value.text;
      }
    }
  }

  // Refuses a key written twice within one source (e.g. thread_count and intra_op_parallelism).
  Status Claim(const std::string& path, const std::string& written, const std::string& where) {
    auto [it, inserted] = claimed_.emplace(path, std::make_pair(written, where));
    if (inserted) return OkStatus();
    if (written == path) {
      return InvalidArgumentError("{}: {} is given twice (also as {} at {})", where, path,
                                  it->second.first, it->second.second);
    }
    return InvalidArgumentError("{}: {} sets {}, which is given twice (also as {} at {})", where,
                                written, path, it->second.first, it->second.second);
  }

  // DeepSpeed's deprecated spellings whose meaning is a different setting.
  Result<bool> ApplyDeprecated(const std::string& path, const ConfigNode& node,
                               const std::string& where) {
    if (path == "optimizer.params.max_grad_norm") {
      return InvalidArgumentError(
          "{}: 'max_grad_norm' is not supported as an optimizer parameter, please switch to using "
          "the deepspeed parameter 'gradient_clipping' see: "
          "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details",
          where);
    }
    if (path == "zero_optimization" && IsScalar(node)) {
      std::optional<bool> b = ParseBool(node);
      if (!b) {
        return InvalidArgumentError(
            "{}: zero_optimization is a section: expected a mapping, got {}", where,
            node.Describe());
      }
      Note(LogLevel::kWarn,
           fmt::format("{}: zero_optimization: {} is DeepSpeed's deprecated form; read as stage {}",
                       where, node.text, *b ? 1 : 0));
      SLUICE_RETURN_IF_ERROR(Claim("zero_optimization.stage", "zero_optimization", where));
      values_->Set("zero_optimization.stage", int64_t{*b ? 1 : 0}, source_, where);
      return true;
    }
    struct Mapping {
      const char* path;
      const char* target;  // set to "cpu" when true; nullptr = ignored, as DeepSpeed does
      const char* advice;
    };
    static constexpr Mapping kMappings[] = {
        {"zero_optimization.cpu_offload", "zero_optimization.offload_optimizer.device",
         "use offload_optimizer: {device: cpu}"},
        {"zero_optimization.cpu_offload_param", "zero_optimization.offload_param.device",
         "use offload_param: {device: cpu}"},
        {"zero_optimization.cpu_offload_use_pin_memory", nullptr,
         "DeepSpeed ignores it; use offload_optimizer.pin_memory / offload_param.pin_memory"},
    };
    for (const Mapping& m : kMappings) {
      if (path != m.path) continue;
      std::optional<bool> b = ParseBool(node);
      if (node.kind == ConfigNode::Kind::kNull) return true;
      if (!b) {
        return InvalidArgumentError("{}: {}: expected true or false, got {}", where, path,
                                    node.Describe());
      }
      if (m.target == nullptr) {
        Note(LogLevel::kWarn,
             fmt::format("{}: {} is deprecated and has no effect ({})", where, path, m.advice));
        return true;
      }
      Note(LogLevel::kWarn,
           fmt::format("{}: {} is deprecated in DeepSpeed; {}", where, path, m.advice));
      if (*b) {
        SLUICE_RETURN_IF_ERROR(Claim(m.target, path, where));
        values_->Set(m.target, std::string("cpu"), source_, where, fmt::format("from {}", path));
      }
      return true;
    }
    return false;
  }

  Status UnknownKey(const std::string& path, const std::string& where) {
    std::string section(SettingParentPath(path));
    std::string name = path.substr(section.empty() ? 0 : section.size() + 1);
    std::string best;
    size_t best_distance = SIZE_MAX;
    for (const std::string& candidate : KnownConfigChildNames(section)) {
      size_t d = ConfigKeyDistance(name, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    }
    size_t limit = std::max<size_t>(2, name.size() / 3);
    if (!best.empty() && best_distance <= limit) {
      return InvalidArgumentError("{}: unknown key {} (did you mean {}?)", where, path,
                                  Join(section, best));
    }
    std::vector<std::string> elsewhere = KnownConfigPathsNamed(name);
    if (!elsewhere.empty()) {
      return InvalidArgumentError("{}: unknown key {} ({} is a key of {})", where, path, name,
                                  fmt::join(elsewhere, " and "));
    }
    std::vector<std::string> known = registry_.ChildNames(section);
    return InvalidArgumentError("{}: unknown key {}; the keys of {} are: {}", where, path,
                                section.empty() ? "the top level" : section,
                                fmt::join(known, ", "));
  }

  ValueSource source_;
  std::string origin_name_;
  SettingValues* values_;
  std::vector<std::string>* notes_;
  std::vector<Status>* problems_;
  std::string refused_optimizer_;  // see NoteRefusedOptimizer
  const SettingsRegistry& registry_;
  std::map<std::string, std::pair<std::string, std::string>> claimed_;
};

// Builds {a: {b: {c: value}}} for the override "a.b.c", so that it is checked like a document.
ConfigNode NestOverride(std::string_view path, ConfigNode value) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  ConfigNode node = std::move(value);
  for (size_t i = parts.size(); i-- > 0;) {
    ConfigNode map;
    map.kind = ConfigNode::Kind::kMap;
    map.entries.push_back({std::string(parts[i]), {}, std::move(node)});
    node = std::move(map);
  }
  return node;
}

Status ApplyOverride(const std::string& path, std::string_view text, ValueSource source,
                     const std::string& origin, SettingValues* values,
                     std::vector<std::string>* notes, std::vector<Status>* problems) {
  // A path deeper than any document may nest is no key either (and is not built as a tree).
  if (path.empty() || path.front() == '.' || path.back() == '.' ||
      path.find("..") != std::string::npos ||
      static_cast<size_t>(std::count(path.begin(), path.end(), '.')) >= kMaxConfigDepth) {
    return InvalidArgumentError("{}: \"{}\" is not a key path such as zero_optimization.stage",
                                origin, path);
  }
  ConfigNode value;
  const SettingSpec* spec = values->registry().Find(path);
  if (spec != nullptr && spec->type == SettingType::kString) {
    // Paths and names are taken verbatim, so "a: b" or "[x]" need no quoting.
    value.kind = text.empty() ? ConfigNode::Kind::kNull : ConfigNode::Kind::kScalar;
    value.scalar_kind = ConfigNode::ScalarKind::kString;
    value.text = std::string(text);
  } else {
    SLUICE_ASSIGN_OR_RETURN(value, ParseConfigValueText(text, origin));
  }
  Applier applier(source, origin, values, notes, problems);
  return applier.ApplyMap(NestOverride(path, std::move(value)), "");
}

// Stops at the first failure, or (a `problems` sink) lists it and goes on.
Status Keep(Status status, std::vector<Status>* problems) {
  if (status.ok() || problems == nullptr) return status;
  problems->push_back(std::move(status));
  return OkStatus();
}

}  // namespace

size_t ConfigKeyDistance(std::string_view a, std::string_view b) {
  std::string x = Lower(a), y = Lower(b);
  std::vector<size_t> prev(y.size() + 1), cur(y.size() + 1);
  for (size_t j = 0; j <= y.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= x.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= y.size(); ++j) {
      size_t substitute = prev[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[y.size()];
}

Status ApplyConfigDocument(const ConfigNode& root, std::string_view source_name,
                           SettingValues* values, std::vector<std::string>* notes,
                           std::vector<Status>* problems) {
  if (root.kind == ConfigNode::Kind::kNull) return OkStatus();  // an empty file
  if (root.kind != ConfigNode::Kind::kMap) {
    return InvalidArgumentError("{}: a config is a mapping of keys, got {}",
                                FormatSourcePos(source_name, root.pos), root.Describe());
  }
  Applier applier(ValueSource::kFile, std::string(source_name), values, notes, problems);
  return applier.ApplyMap(root, "");
}

Status ApplyEnvOverrides(const std::vector<std::pair<std::string, std::string>>& env,
                         SettingValues* values, std::vector<std::string>* notes,
                         std::vector<Status>* problems) {
  std::vector<std::pair<std::string, std::string>> sorted = env;
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [name, text] : sorted) {
    std::optional<std::string> path = values->registry().PathFromEnvVar(name);
    if (!path) continue;
    std::string origin = fmt::format("environment variable {}={}", name, text);
    SLUICE_RETURN_IF_ERROR(Keep(
        ApplyOverride(*path, text, ValueSource::kEnv, origin, values, notes, problems), problems));
  }
  return OkStatus();
}

Status ApplySetOverrides(const std::vector<std::string>& overrides, SettingValues* values,
                         std::vector<std::string>* notes, std::vector<Status>* problems) {
  for (const std::string& item : overrides) {
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      SLUICE_RETURN_IF_ERROR(
          Keep(InvalidArgumentError("--set {}: expected key=value, e.g. zero_optimization.stage=3",
                                    item),
               problems));
      continue;
    }
    std::string path = item.substr(0, eq);
    std::string origin = fmt::format("--set {}", item);
    SLUICE_RETURN_IF_ERROR(Keep(ApplyOverride(path, std::string_view(item).substr(eq + 1),
                                              ValueSource::kSet, origin, values, notes, problems),
                                problems));
  }
  return OkStatus();
}

}  // namespace sluice
