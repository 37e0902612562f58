// Element counts and byte cells for people: "124,439,808", "1.50 MiB".
#pragma once

#include <cstdint>
#include <string>

#include "runtime/size_format.h"

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

// A byte count for a table cell: "-" for none.
inline std::string ByteCell(int64_t bytes) { return bytes == 0 ? "-" : FormatBytes(bytes); }

}  // namespace sluice::estimate
