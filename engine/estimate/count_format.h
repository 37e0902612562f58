// Element counts for people: "124,439,808".
#pragma once

#include <cstdint>
#include <string>

namespace sluice::estimate {

inline std::string FormatCount(int64_t value) {
  const std::string digits = std::to_string(value);
  const size_t sign = value < 0 ? 1 : 0;
  std::string out = digits.substr(0, sign);
  for (size_t i = sign; i < digits.size(); ++i) {
    if (i > sign && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace sluice::estimate
