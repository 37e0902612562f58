// Byte sizes for people: "12.00 MiB" out, "64MiB" / "1.5 GiB" / "5e8" in. Used for memory limits,
// buffer sizes and every message that reports memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice {

// "0 B", "512 B", "4.00 KiB", "12.00 MiB", "1.50 GiB", "2.00 TiB" (powers of 1024, two decimals).
std::string FormatBytes(uint64_t bytes);

// Exact and parseable back: "256MiB" when the size is a whole number of the largest binary unit
// that divides it, else plain bytes ("1000", "0"). For writing sizes into configs and records.
std::string FormatByteSizeExact(uint64_t bytes);

// Parses a byte count: a non-negative number (integer, decimal or exponent form) and an optional
// unit, with optional blanks between. Units are case-insensitive: B; KiB MiB GiB TiB and K M G T
// (powers of 1024); KB MB GB TB (powers of 1000). "64MiB", "1.5 GiB", "512", "5e8", "2 GB".
// The result must be a whole number of bytes ("1.5 GiB" is, "1.1 KiB" is not). Errors are
// InvalidArgument and quote the text; callers add the setting name with WithContext().
Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace sluice
