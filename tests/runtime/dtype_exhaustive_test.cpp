// Every one of the 2^32 f32 values through F32ToBf16 and F32ToF16 (label slow). Non-NaN inputs
// are walked in increasing magnitude beside the reference's current 16-bit pattern, which moves
// on past each rounding midpoint (a tie going to the even pattern): the definition of
// round-to-nearest-even, evaluated in double with float_reference.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ref/half.h"
#include "tests/runtime/float_reference.h"

namespace sluice {
namespace {

using testing::DecodeReference;
using testing::Format16;
using testing::IsNanPattern;
using testing::kBf16Format;
using testing::kF16Format;
using testing::NextMagnitudeReference;
using testing::RoundReference;

constexpr uint32_t kF32Infinity = 0x7f800000u;

// The magnitude pattern whose value is `value` (which must be representable), by bisection over
// the monotone finite patterns.
uint16_t EncodeExact(const Format16& format, double value) {
  if (std::isinf(value)) return format.infinity_bits();
  uint32_t low = 0, high = format.infinity_bits();
  while (low < high) {
    uint32_t mid = (low + high) / 2;
    if (DecodeReference(format, static_cast<uint16_t>(mid)) < value) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return static_cast<uint16_t>(low);
}

struct Mismatches {
  std::mutex mu;
  uint64_t count = 0;
  std::vector<std::string> first;

  void Add(uint32_t input, uint16_t got, uint16_t expected) {
    std::lock_guard lock(mu);
    ++count;
    if (first.size() < 8) {
      char text[96];
      std::snprintf(text, sizeof(text), "f32 0x%08x gave 0x%04x, expected 0x%04x", input, got,
                    expected);
      first.emplace_back(text);
    }
  }
};

// Checks magnitudes [begin, end) (both signs) of the finite-or-infinite f32 range.
void SweepRange(const Format16& format, uint16_t (*convert)(float), uint32_t begin, uint32_t end,
                Mismatches& mismatches) {
  const uint16_t infinity = format.infinity_bits();
  uint16_t current = EncodeExact(format, RoundReference(format, std::bit_cast<float>(begin)));
  double midpoint =
      current == infinity
          ? INFINITY
          : (DecodeReference(format, current) + NextMagnitudeReference(format, current)) / 2;
  for (uint32_t bits = begin; bits < end; ++bits) {
    double value = std::bit_cast<float>(bits);
    while (value > midpoint || (value == midpoint && (current & 1u) != 0)) {
      ++current;
      midpoint =
          current == infinity
              ? INFINITY
              : (DecodeReference(format, current) + NextMagnitudeReference(format, current)) / 2;
    }
    uint16_t positive = convert(std::bit_cast<float>(bits));
    uint16_t negative = convert(std::bit_cast<float>(bits | 0x80000000u));
    if (positive != current) mismatches.Add(bits, positive, current);
    if (negative != (current | 0x8000u)) {
      mismatches.Add(bits | 0x80000000u, negative, static_cast<uint16_t>(current | 0x8000u));
    }
  }
}

void SweepNans(const Format16& format, uint16_t (*convert)(float), Mismatches& mismatches) {
  for (uint32_t bits = kF32Infinity + 1; bits <= 0x7fffffffu; ++bits) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      uint16_t got = convert(std::bit_cast<float>(bits | sign));
      bool ok = IsNanPattern(format, got) && ((got & 0x8000u) != 0) == (sign != 0) &&
                (got & format.quiet_bit()) != 0;
      if (!ok) mismatches.Add(bits | sign, got, format.infinity_bits() | format.quiet_bit());
    }
  }
}

void SweepAllF32(const Format16& format, uint16_t (*convert)(float)) {
  Mismatches mismatches;
  const uint32_t threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  const uint32_t total = kF32Infinity + 1;  // magnitudes 0 .. infinity inclusive
  const uint32_t chunk = (total + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < threads; ++t) {
    uint32_t begin = t * chunk;
    uint32_t end = std::min(total, begin + chunk);
    workers.emplace_back([&, begin, end] { SweepRange(format, convert, begin, end, mismatches); });
  }
  SweepNans(format, convert, mismatches);
  for (std::thread& worker : workers) worker.join();
  std::string examples;
  for (const std::string& line : mismatches.first) examples += "\n  " + line;
  EXPECT_EQ(mismatches.count, 0u) << format.name << " mismatches, first ones:" << examples;
}

TEST(DTypeExhaustiveTest, EveryF32ToBf16) { SweepAllF32(kBf16Format, &kernels::F32ToBf16); }

TEST(DTypeExhaustiveTest, EveryF32ToF16) { SweepAllF32(kF16Format, &kernels::F32ToF16); }

}  // namespace
}  // namespace sluice
