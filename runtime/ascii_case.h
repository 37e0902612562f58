// ASCII case folding for keys, units and names (locale-independent, unlike std::tolower).
#pragma once

#include <string>
#include <string_view>

namespace sluice {

inline std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace sluice
