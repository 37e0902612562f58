// Everything printed from the registry: --help-config text, the Markdown table of
// docs/config.md, the run record, and the readable resolved config of `sluice config check`.
#include <fmt/format.h>

#include <charconv>

#include "engine/config/config.h"
#include "runtime/json_text.h"
#include "runtime/size_format.h"

namespace sluice {
namespace {

constexpr const char* kPreamble =
    "Sluice config settings. A config file (YAML or JSON) uses DeepSpeed's key names, defaults\n"
    "and meanings, plus Sluice's model, data, device and run sections. Precedence: default <\n"
    "file < environment (SLUICE_CFG_ + the path upper-cased with '.' written as \"__\", e.g.\n"
    "SLUICE_CFG_ZERO_OPTIMIZATION__STAGE=3) < --set path=value. Settings marked auto accept\n"
    "\"auto\", resolved as described. Numbers accept 5e8; sizes accept units (64MiB, 1GB).\n";

std::string DisplayValue(const SettingSpec& spec, const SettingValue& value) {
  if (spec.type == SettingType::kSize && std::holds_alternative<int64_t>(value)) {
    return FormatByteSizeExact(static_cast<uint64_t>(std::get<int64_t>(value)));
  }
  if (spec.type == SettingType::kString && std::holds_alternative<std::string>(value)) {
    const std::string& s = std::get<std::string>(value);
    bool plain = !s.empty() && s != "auto" && s != "true" && s != "false" && s != "null" &&
                 s.find_first_of(":#{}[],&*!|>'\"%@`") == std::string::npos && s.front() != ' ' &&
                 s.back() != ' ' && s.front() != '-';
    double d = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec == std::errc() && end == s.data() + s.size()) plain = false;
    return plain ? s : fmt::format("\"{}\"", s);
  }
  if (std::holds_alternative<std::string>(value)) return std::get<std::string>(value);
  return FormatSettingValue(value);
}

std::string DefaultText(const SettingSpec& spec) {
  if (spec.default_kind == DefaultKind::kValue) return DisplayValue(spec, spec.default_value);
  return DescribeDefault(spec);
}

std::string AllowedText(const SettingSpec& spec) {
  if (spec.type == SettingType::kSize && (spec.min || spec.max)) {
    std::string text = "a size in bytes or with a unit";
    if (spec.min)
      text += fmt::format(", at least {}", FormatByteSizeExact(static_cast<uint64_t>(*spec.min)));
    return text;
  }
  return DescribeAllowed(spec);
}

std::string TypeText(const SettingSpec& spec) { return std::string(SettingTypeName(spec.type)); }

std::string EscapeCell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string HelpConfigText() {
  const SettingsRegistry& registry = ConfigRegistry();
  std::string out = kPreamble;
  std::string_view current_section = "-";
  for (const SettingSpec& spec : registry.settings()) {
    std::string_view section = SettingParentPath(spec.path);
    if (section != current_section) {
      current_section = section;
      std::string doc = registry.SectionDoc(section);
      out += fmt::format("\n[{}]{}{}\n", section.empty() ? "top level" : section,
                         doc.empty() ? "" : " ", doc);
    }
    out += fmt::format("  {} ({}, default {})\n", spec.path, TypeText(spec), DefaultText(spec));
    out += fmt::format("      {}\n", spec.doc);
    std::string allowed = AllowedText(spec);
    if (spec.type != SettingType::kString && spec.type != SettingType::kBool) {
      out += fmt::format("      allowed: {}\n", allowed);
    }
    if (spec.accepts_auto) out += fmt::format("      auto: {}\n", spec.auto_note);
    out += fmt::format("      env: {}\n", spec.env_var);
  }
  return out;
}

std::string HelpConfigMarkdown() {
  const SettingsRegistry& registry = ConfigRegistry();
  std::string out =
      "| Setting | Type | Default | Allowed | Description |\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const SettingSpec& spec : registry.settings()) {
    std::string allowed = spec.type == SettingType::kString ? "" : AllowedText(spec);
    std::string description = spec.doc;
    if (spec.accepts_auto) description += fmt::format(". `auto`: {}", spec.auto_note);
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", spec.path, TypeText(spec),
                       EscapeCell(DefaultText(spec)), EscapeCell(allowed), EscapeCell(description));
  }
  return out;
}

nlohmann::ordered_json ConfigRecordJson(const Config& config) {
  nlohmann::ordered_json record;
  record["schema"] = "sluice.config_record";
  record["version"] = 1;
  record["source_file"] = config.source_file;
  record["source_files"] = config.source_files;
  record["world_size"] = config.world_size;
  record["dp_world_size"] = config.dp_world_size;
  record["settings"] = config.values.ToRecordJson();
  // Where each given value was written (the last layer that set it): "aio_tuned.yaml:3:3".
  for (const SettingSpec& spec : config.values.registry().settings()) {
    const SettingEntry& e = config.values.entry(spec.path);
    if (!e.origin.empty()) record["settings"][spec.path]["origin"] = e.origin;
  }
  record["notes"] = config.notes;
  // Values and file names are bytes; the record is written as JSON by the trainer and into every
  // checkpoint manifest.
  ReplaceInvalidUtf8(&record);
  return record;
}

std::string ConfigToText(const Config& config) {
  const SettingsRegistry& registry = config.values.registry();
  std::string out = fmt::format("# resolved config{} for world size {} (data-parallel {})\n",
                                config.source_file.empty() ? "" : " of " + config.source_file,
                                config.world_size, config.dp_world_size);
  std::vector<std::string> open;  // the section path currently printed, one name per level
  for (const SettingSpec& spec : registry.settings()) {
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
      size_t dot = spec.path.find('.', start);
      parts.push_back(spec.path.substr(start, dot == std::string::npos ? dot : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    size_t depth = parts.size() - 1;
    size_t common = 0;
    while (common < open.size() && common < depth && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t i = common; i < depth; ++i) {
      out += fmt::format("{:{}}{}:\n", "", 2 * i, parts[i]);
      open.push_back(parts[i]);
    }
    const SettingEntry& e = config.values.entry(spec.path);
    std::string line =
        fmt::format("{:{}}{}: {}", "", 2 * depth, parts.back(), DisplayValue(spec, e.value));
    std::string comment(ValueSourceName(e.source));
    // With several layers, which file a value came from is the point of the listing.
    if (e.source == ValueSource::kFile && !e.origin.empty()) comment += " " + e.origin;
    if (!e.note.empty()) comment += ": " + e.note;
    out += fmt::format("{:<56} # {}\n", line, comment);
  }
  if (!config.notes.empty()) {
    out += "# notes:\n";
    for (const std::string& note : config.notes) out += fmt::format("#   {}\n", note);
  }
  return out;
}

}  // namespace sluice
