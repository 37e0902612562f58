// Strings that may hold any bytes, on their way into JSON. A config value, a file name or a run
// directory is bytes: a Latin-1 file name is a valid Linux path and is used as it is. JSON text
// is UTF-8, and nlohmann::json::dump throws a type_error on anything else, which nothing would
// catch. JSON records therefore carry such strings with each ill-formed sequence written as
// U+FFFD: the record says which file, the program uses the real bytes.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace sluice {

// Offset of the first byte of `text` that is not part of a well-formed UTF-8 sequence (RFC
// 3629: no overlong forms, surrogates or code points above U+10FFFF), or npos.
size_t FindInvalidUtf8(std::string_view text);

// `value` as a JSON number, or null when it is not finite (JSON has no inf or NaN).
inline nlohmann::ordered_json FiniteOrNull(double value) {
  if (!std::isfinite(value)) return nullptr;
  return value;
}

// `text` with each maximal ill-formed subsequence replaced by U+FFFD (Unicode's recommended
// practice, as nlohmann's error_handler_t::replace does).
std::string ToValidUtf8(std::string_view text);

// Makes every string and key of `json` valid UTF-8, so that a later dump() cannot throw. For
// records that others dump and store (config.resolved.json, summary.json, the checkpoint
// manifest).
void ReplaceInvalidUtf8(nlohmann::ordered_json* json);

// json.dump(indent) that writes invalid UTF-8 as U+FFFD instead of throwing.
template <typename Json>
std::string JsonText(const Json& json, int indent = -1) {
  return json.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace sluice
