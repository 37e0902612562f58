#include "runtime/size_format.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include "runtime/ascii_case.h"

namespace sluice {
namespace {

struct Unit {
  std::string_view name;  // lower case
  uint64_t multiplier;
};

constexpr uint64_t kKi = 1024;
constexpr std::array<Unit, 13> kUnits = {{
    {"b", 1},
    {"k", kKi},
    {"kib", kKi},
    {"m", kKi* kKi},
    {"mib", kKi* kKi},
    {"g", kKi* kKi* kKi},
    {"gib", kKi* kKi* kKi},
    {"t", kKi* kKi* kKi* kKi},
    {"tib", kKi* kKi* kKi* kKi},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", 1000ull * 1000 * 1000},
    {"tb", 1000ull * 1000 * 1000 * 1000},
}};

std::string_view Trim(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  constexpr std::array<std::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < kKi) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kNames.size()) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kNames[unit]);
}

std::string FormatByteSizeExact(uint64_t bytes) {
  constexpr std::array<std::string_view, 4> kNames = {"TiB", "GiB", "MiB", "KiB"};
  for (size_t i = 0; i < kNames.size(); ++i) {
    const uint64_t unit = uint64_t{1} << (10 * (kNames.size() - i));
    if (bytes != 0 && bytes % unit == 0) return fmt::format("{}{}", bytes / unit, kNames[i]);
  }
  return fmt::format("{}", bytes);
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  if (trimmed.empty()) {
    return InvalidArgumentError(
        "empty byte size; expected a number with an optional unit, "
        "e.g. \"64MiB\", \"1.5 GiB\" or \"5e8\"");
  }
  if (trimmed.front() == '-') {
    return InvalidArgumentError("byte size \"{}\" is negative", text);
  }
  const char* begin = trimmed.data();
  const char* end = trimmed.data() + trimmed.size();
  // Integers are parsed exactly; a decimal point or an exponent takes the floating-point path.
  uint64_t integer = 0;
  const auto [integer_end, integer_error] = std::from_chars(begin, end, integer);
  const bool is_integer =
      integer_error == std::errc() &&
      (integer_end == end || (*integer_end != '.' && *integer_end != 'e' && *integer_end != 'E'));
  double number = 0;
  const char* number_end = integer_end;
  std::errc error = integer_error;
  if (!is_integer) {
    const auto parsed = std::from_chars(begin, end, number, std::chars_format::general);
    number_end = parsed.ptr;
    error = parsed.ec;
  }
  if (error == std::errc::result_out_of_range) {
    return InvalidArgumentError("byte size \"{}\" is too large (more than 2^64 - 1 bytes)", text);
  }
  if (error != std::errc() || !std::isfinite(number)) {
    return InvalidArgumentError(
        "byte size \"{}\" does not start with a number; expected e.g. \"64MiB\", \"1.5 GiB\", "
        "\"512\" or \"5e8\"",
        text);
  }
  const std::string unit_text = AsciiLower(Trim(std::string_view(number_end, end - number_end)));
  uint64_t multiplier = 1;
  if (!unit_text.empty()) {
    bool found = false;
    for (const Unit& unit : kUnits) {
      if (unit.name == unit_text) {
        multiplier = unit.multiplier;
        found = true;
        break;
      }
    }
    if (!found) {
      return InvalidArgumentError(
          "unknown unit \"{}\" in byte size \"{}\"; use B, KiB, MiB, GiB, TiB (powers of 1024) "
          "or KB, MB, GB, TB (powers of 1000)",
          Trim(std::string_view(number_end, end - number_end)), text);
    }
  }
  if (is_integer) {
    if (integer > std::numeric_limits<uint64_t>::max() / multiplier) {
      return InvalidArgumentError("byte size \"{}\" is too large (more than 2^64 - 1 bytes)", text);
    }
    return integer * multiplier;
  }
  const long double exact = static_cast<long double>(number) * multiplier;
  // 2^64 is exactly representable; anything at or above it does not fit.
  if (exact >= 18446744073709551616.0L) {
    return InvalidArgumentError("byte size \"{}\" is too large (more than 2^64 - 1 bytes)", text);
  }
  const long double bytes = std::nearbyint(exact);
  // Decimal fractions are inexact in binary: "0.1 MB" is 100000 up to rounding noise.
  if (std::fabs(exact - bytes) > 1e-9L * std::max(1.0L, exact)) {
    return InvalidArgumentError("byte size \"{}\" is not a whole number of bytes ({} bytes)", text,
                                static_cast<double>(exact));
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace sluice
