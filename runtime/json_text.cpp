#include "runtime/json_text.h"

#include <utility>

namespace sluice {
namespace {

// Length of the well-formed sequence at text[i], or 0 with *bad set to the length of the maximal
// ill-formed subsequence there (at least 1). Ranges from Unicode's table of well-formed UTF-8.
size_t SequenceAt(std::string_view text, size_t i, size_t* bad) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range; later bytes 80..BF
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong below
    if (lead == 0xED) high = 0x9F;  // surrogates above
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong below
    if (lead == 0xF4) high = 0x8F;  // past U+10FFFF above
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k < length; ++k) {
    if (i + k >= text.size() || byte(i + k) < low || byte(i + k) > high) {
      *bad = k;
      return 0;
    }
    low = 0x80;
    high = 0xBF;
  }
  return length;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view text) {
  size_t bad = 0;
  for (size_t i = 0; i < text.size();) {
    size_t length = SequenceAt(text, i, &bad);
    if (length == 0) return i;
    i += length;
  }
  return std::string_view::npos;
}

std::string ToValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t bad = 0;
  for (size_t i = 0; i < text.size();) {
    size_t length = SequenceAt(text, i, &bad);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(text, i, length);
      i += length;
    }
  }
  return out;
}

void ReplaceInvalidUtf8(nlohmann::ordered_json* json) {
  if (json->is_string()) {
    std::string& text = json->get_ref<std::string&>();
    if (FindInvalidUtf8(text) != std::string::npos) text = ToValidUtf8(text);
  } else if (json->is_array()) {
    for (nlohmann::ordered_json& item : *json) ReplaceInvalidUtf8(&item);
  } else if (json->is_object()) {
    bool keys_valid = true;
    for (auto it = json->begin(); it != json->end(); ++it) {
      keys_valid = keys_valid && FindInvalidUtf8(it.key()) == std::string::npos;
      ReplaceInvalidUtf8(&it.value());
    }
    if (keys_valid) return;
    // Keys cannot be changed in place.
    nlohmann::ordered_json rebuilt = nlohmann::ordered_json::object();
    for (auto it = json->begin(); it != json->end(); ++it) {
      rebuilt[ToValidUtf8(it.key())] = std::move(it.value());
    }
    *json = std::move(rebuilt);
  }
}

}  // namespace sluice
