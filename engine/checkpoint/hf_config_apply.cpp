// ApplyHfModelConfig (hf_config.h): the config.json beside model.init_from onto the model
// settings, run by the config resolver before it derives the model's other values.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <variant>

#include "engine/checkpoint/hf_config.h"
#include "runtime/logging.h"

namespace sluice::checkpoint {
namespace {

// Numbers compare by value: a YAML 500000 and config.json's 500000.0 are the same rope_theta.
bool SameValue(const SettingValue& a, const SettingValue& b) {
  auto number = [](const SettingValue& v) -> std::optional<double> {
    if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    if (const double* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
  };
  if (auto x = number(a), y = number(b); x && y) return *x == *y;
  return a == b;
}

std::string FieldText(const HfModelSetting& s) {
  return s.defaulted ? fmt::format("{} (absent: transformers' default)", s.field) : s.field;
}

void Note(LogLevel level, std::string text, std::vector<std::string>* notes) {
  if (LogEnabled(level, "config")) LogMessage(level, "config", text);
  notes->push_back(std::move(text));
}

}  // namespace

Status ApplyHfModelConfig(std::string_view source_name, SettingValues* values,
                          std::vector<std::string>* notes) {
  const std::optional<std::string> init_from = values->FindString("model.init_from");
  if (!init_from.has_value()) return OkStatus();
  const std::optional<std::filesystem::path> json = FindHfConfigJson(*init_from);
  if (!json.has_value()) {
    Note(LogLevel::kInfo,
         fmt::format("model.init_from {}: no config.json beside it, so the model section is taken "
                     "as written (the weights must match it)",
                     *init_from),
         notes);
    return OkStatus();
  }
  const std::string prefix = source_name.empty() ? "" : fmt::format("{}: ", source_name);
  Result<HfModelConfig> hf = ReadHfModelConfig(*json);
  if (!hf.ok()) {
    return Status(hf.status()).WithContext(fmt::format("{}model.init_from {}", prefix, *init_from));
  }
  std::vector<std::string> filled;
  std::vector<std::string> mismatches;
  for (const HfModelSetting& s : hf->settings) {
    if (!values->IsGiven(s.key)) {
      values->Resolve(s.key, s.value, fmt::format("{} {}", json->string(), FieldText(s)));
      // The field's name where config.json spells it otherwise: "model.d_model 768 (n_embd)".
      const bool same_name = SettingLeafName(s.key) == s.field;
      filled.push_back(fmt::format("{} {}{}", s.key, FormatSettingValue(s.value),
                                   same_name ? "" : fmt::format(" ({})", s.field)));
      continue;
    }
    const SettingEntry& mine = values->entry(s.key);
    if (SameValue(mine.value, s.value)) continue;
    mismatches.push_back(
        fmt::format("{} {}{} but {} {}", s.key, FormatSettingValue(mine.value),
                    mine.origin.empty() ? "" : fmt::format(" (set at {})", mine.origin),
                    FieldText(s), FormatSettingValue(s.value)));
  }
  if (!mismatches.empty()) {
    return InvalidArgumentError(
        "{}model.init_from {}: the model section disagrees with {}: {}; remove these settings "
        "to take config.json's values, or load weights of the model you describe",
        prefix, *init_from, json->string(), fmt::join(mismatches, "; "));
  }
  Note(LogLevel::kInfo,
       fmt::format("model.init_from {}: {} model from {}{}{}", *init_from, hf->model_type,
                   json->string(), filled.empty() ? "" : "; filled ", fmt::join(filled, ", ")),
       notes);
  return OkStatus();
}

}  // namespace sluice::checkpoint
