#include "runtime/size_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * 1024;
constexpr uint64_t kGiB = kMiB * 1024;

uint64_t Parse(std::string_view text) {
  Result<uint64_t> result = ParseByteSize(text);
  EXPECT_TRUE(result.ok()) << text << ": " << result.status().ToString();
  return result.ok() ? *result : 0;
}

std::string ParseError(std::string_view text) {
  Result<uint64_t> result = ParseByteSize(text);
  EXPECT_FALSE(result.ok()) << text << " parsed as " << (result.ok() ? *result : 0);
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  return result.status().message();
}

TEST(FormatBytes, UsesBinaryUnitsWithTwoDecimals) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(12 * kMiB), "12.00 MiB");
  EXPECT_EQ(FormatBytes(60 * kMiB), "60.00 MiB");
  EXPECT_EQ(FormatBytes(3 * kGiB / 2), "1.50 GiB");
  EXPECT_EQ(FormatBytes(2048 * kGiB), "2.00 TiB");
  EXPECT_EQ(FormatBytes(5 * 1024 * 1024 * kGiB), "5120.00 TiB");
}

TEST(ParseByteSize, AcceptsPlainNumbersAndExponents) {
  EXPECT_EQ(Parse("512"), 512u);
  EXPECT_EQ(Parse("0"), 0u);
  EXPECT_EQ(Parse("5e8"), 500000000u);
  EXPECT_EQ(Parse("1.5e3"), 1500u);
  EXPECT_EQ(Parse("  4096 "), 4096u);
  EXPECT_EQ(Parse("18446744073709551615"), UINT64_MAX);  // integers stay exact
  EXPECT_EQ(Parse("9007199254740993"), 9007199254740993u);
}

TEST(ParseByteSize, AcceptsBinaryAndDecimalUnits) {
  EXPECT_EQ(Parse("64MiB"), 64 * kMiB);
  EXPECT_EQ(Parse("1.5 GiB"), 3 * kGiB / 2);
  EXPECT_EQ(Parse("1.5GiB"), 3 * kGiB / 2);
  EXPECT_EQ(Parse("8 KiB"), 8 * kKiB);
  EXPECT_EQ(Parse("2T"), 2 * 1024 * kGiB);
  EXPECT_EQ(Parse("16g"), 16 * kGiB);
  EXPECT_EQ(Parse("64mib"), 64 * kMiB);
  EXPECT_EQ(Parse("100B"), 100u);
  EXPECT_EQ(Parse("2 GB"), 2000000000u);
  EXPECT_EQ(Parse("3kb"), 3000u);
  EXPECT_EQ(Parse("0.5MB"), 500000u);
  EXPECT_EQ(Parse("0.1 MB"), 100000u);  // inexact in binary, whole in bytes
  EXPECT_EQ(Parse("0.25KiB"), 256u);
}

TEST(ParseByteSize, RejectsBadUnitsWithTheAcceptedList) {
  const std::string message = ParseError("64XB");
  EXPECT_THAT(message, HasSubstr("unknown unit \"XB\" in byte size \"64XB\""));
  EXPECT_THAT(message, HasSubstr("KiB, MiB, GiB"));
  EXPECT_THAT(ParseError("5e"), HasSubstr("unknown unit \"e\""));
  EXPECT_THAT(ParseError("64 MiB extra"), HasSubstr("unknown unit \"MiB extra\""));
}

TEST(ParseByteSize, RejectsMalformedNumbers) {
  EXPECT_THAT(ParseError(""), HasSubstr("empty byte size"));
  EXPECT_THAT(ParseError("   "), HasSubstr("empty byte size"));
  EXPECT_THAT(ParseError("MiB"), HasSubstr("does not start with a number"));
  EXPECT_THAT(ParseError("-5MiB"), HasSubstr("is negative"));
  EXPECT_THAT(ParseError("inf"), HasSubstr("does not start with a number"));
  EXPECT_THAT(ParseError("nan GiB"), HasSubstr("does not start with a number"));
  EXPECT_THAT(ParseError("+5"), HasSubstr("does not start with a number"));
  EXPECT_THAT(ParseError("1.5"), HasSubstr("not a whole number of bytes"));
  EXPECT_THAT(ParseError("1.5B"), HasSubstr("not a whole number of bytes"));
  EXPECT_THAT(ParseError("1.1 KiB"), HasSubstr("not a whole number of bytes (1126.4 bytes)"));
}

TEST(ParseByteSize, RejectsSizesPastTwoToTheSixtyFour) {
  EXPECT_THAT(ParseError("18446744073709551616"), HasSubstr("too large"));
  EXPECT_THAT(ParseError("16777216 TiB"), HasSubstr("too large"));
  EXPECT_THAT(ParseError("1e30"), HasSubstr("too large"));
  EXPECT_THAT(ParseError("1e400"), HasSubstr("too large"));
}

TEST(ParseByteSize, RoundTripsFormattedSizes) {
  for (uint64_t bytes : {kKiB, 12 * kMiB, 64 * kMiB, 3 * kGiB / 2, 40 * kGiB}) {
    EXPECT_EQ(Parse(FormatBytes(bytes)), bytes) << FormatBytes(bytes);
  }
}

TEST(FormatByteSizeExact, UsesTheLargestUnitThatDividesAndRoundTrips) {
  EXPECT_EQ(FormatByteSizeExact(0), "0");
  EXPECT_EQ(FormatByteSizeExact(1000), "1000");
  EXPECT_EQ(FormatByteSizeExact(2048), "2KiB");
  EXPECT_EQ(FormatByteSizeExact(256 * kMiB), "256MiB");
  EXPECT_EQ(FormatByteSizeExact(3 * kGiB / 2), "1536MiB");
  EXPECT_EQ(FormatByteSizeExact(1024 * kGiB), "1TiB");
  EXPECT_EQ(FormatByteSizeExact(UINT64_MAX), "18446744073709551615");
  for (uint64_t bytes :
       {uint64_t{0}, uint64_t{1000}, 3 * kGiB / 2, 1024 * kGiB, uint64_t{UINT64_MAX}}) {
    EXPECT_EQ(Parse(FormatByteSizeExact(bytes)), bytes);
  }
}

}  // namespace
}  // namespace sluice
