#include "runtime/status.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sluice {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_TRUE(OkStatus().ok());
}

TEST(StatusTest, FactoriesFormatTheMessageAndSetTheCode) {
  Status status = InvalidArgumentError("unknown key '{}' at line {}", "zero_optimizaton", 12);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "unknown key 'zero_optimizaton' at line 12");
  EXPECT_EQ(status.ToString(), "InvalidArgument: unknown key 'zero_optimizaton' at line 12");

  struct Case {
    Status status;
    StatusCode code;
    const char* name;
  };
  std::vector<Case> cases = {
      {NotFoundError("x"), StatusCode::kNotFound, "NotFound"},
      {OutOfRangeError("x"), StatusCode::kOutOfRange, "OutOfRange"},
      {ResourceExhaustedError("x"), StatusCode::kResourceExhausted, "ResourceExhausted"},
      {IoError("x"), StatusCode::kIoError, "IoError"},
      {DataLossError("x"), StatusCode::kDataLoss, "DataLoss"},
      {DeadlineExceededError("x"), StatusCode::kDeadlineExceeded, "DeadlineExceeded"},
      {UnavailableError("x"), StatusCode::kUnavailable, "Unavailable"},
      {UnimplementedError("x"), StatusCode::kUnimplemented, "Unimplemented"},
      {FailedPreconditionError("x"), StatusCode::kFailedPrecondition, "FailedPrecondition"},
      {InternalError("x"), StatusCode::kInternal, "Internal"},
  };
  std::set<std::string_view> names;
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.code) << c.name;
    EXPECT_EQ(StatusCodeName(c.code), c.name);
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": x");
    names.insert(StatusCodeName(c.code));
  }
  EXPECT_EQ(names.size(), cases.size());
}

TEST(StatusTest, ContextChainsOutermostFirst) {
  Status status = IoError("pread failed: Input/output error (EIO)");
  status.WithContext("reading swap file /nvme/a.swp at offset 4096")
      .WithContext("swapping in sub-group 3");
  EXPECT_EQ(status.message(),
            "swapping in sub-group 3: reading swap file /nvme/a.swp at offset 4096: pread "
            "failed: Input/output error (EIO)");
  EXPECT_EQ(status.code(), StatusCode::kIoError);

  Status moved = DataLossError("checksum mismatch").WithContext("loading checkpoint step 10");
  EXPECT_EQ(moved.message(), "loading checkpoint step 10: checksum mismatch");
}

TEST(StatusTest, ContextOnOkStaysOk) {
  Status status = OkStatus().WithContext("anything");
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.message(), "");
}

TEST(ResultTest, HoldsAValueOrAnError) {
  Result<int> value = 42;
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 42);
  EXPECT_EQ(value.value(), 42);
  EXPECT_TRUE(value.status().ok());

  Result<int> error = NotFoundError("no tensor '{}'", "layer3.weight");
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(error.status().message(), "no tensor 'layer3.weight'");
}

TEST(ResultTest, MoveOnlyValuesAndArrow) {
  Result<std::unique_ptr<std::string>> result = std::make_unique<std::string>("abc");
  ASSERT_TRUE(result.ok());
  EXPECT_EQ((*result)->size(), 3u);
  std::unique_ptr<std::string> taken = std::move(result).value();
  EXPECT_EQ(*taken, "abc");

  Result<std::string> text = std::string("hello");
  EXPECT_EQ(text->size(), 5u);
}

TEST(ResultTest, WithContextPrefixesOnlyErrors) {
  Result<int> error = Result<int>(IoError("short read")).WithContext("loading shard 2");
  EXPECT_EQ(error.status().message(), "loading shard 2: short read");
  Result<int> value = Result<int>(7).WithContext("unused");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
}

Result<int> ParsePositive(int x) {
  if (x <= 0) return InvalidArgumentError("{} is not positive", x);
  return x;
}

Status CheckEven(int x) {
  if (x % 2 != 0) return InvalidArgumentError("{} is odd", x);
  return OkStatus();
}

// Uses both macros: parse, check, and report how far it got.
Result<int> DoubleIfPositiveAndEven(int x, int* reached) {
  *reached = 0;
  SLUICE_ASSIGN_OR_RETURN(int parsed, ParsePositive(x));
  *reached = 1;
  SLUICE_RETURN_IF_ERROR(CheckEven(parsed));
  *reached = 2;
  SLUICE_RETURN_IF_ERROR(ParsePositive(parsed));  // a Result works too
  *reached = 3;
  return parsed * 2;
}

TEST(StatusMacrosTest, PropagateTheFirstErrorAndStop) {
  int reached = -1;
  Result<int> ok = DoubleIfPositiveAndEven(4, &reached);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 8);
  EXPECT_EQ(reached, 3);

  Result<int> negative = DoubleIfPositiveAndEven(-3, &reached);
  EXPECT_EQ(reached, 0);
  EXPECT_EQ(negative.status().message(), "-3 is not positive");

  Result<int> odd = DoubleIfPositiveAndEven(3, &reached);
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.status().message(), "3 is odd");
}

TEST(StatusMacrosTest, EvaluateTheExpressionOnce) {
  int calls = 0;
  auto counted = [&calls]() -> Result<std::unique_ptr<int>> {
    ++calls;
    return std::make_unique<int>(5);
  };
  auto run = [&]() -> Status {
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<int> p, counted());
    EXPECT_EQ(*p, 5);
    SLUICE_RETURN_IF_ERROR(counted());
    return OkStatus();
  };
  EXPECT_TRUE(run().ok());
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacrosTest, AssignToAnExistingVariableAndAddContext) {
  auto run = [](int x) -> Status {
    int value = 0;
    SLUICE_ASSIGN_OR_RETURN(value, ParsePositive(x).WithContext("reading 'train_batch_size'"));
    return value == x ? OkStatus() : InternalError("wrong value");
  };
  EXPECT_TRUE(run(3).ok());
  EXPECT_EQ(run(0).message(), "reading 'train_batch_size': 0 is not positive");
}

class ResultDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// A long message lives on the heap: reading it after its temporary died would show garbage
// (or trip ASan), which is how the dangling-reference bug in the macros was found.
TEST(StatusMacrosTest, ContextOnATemporaryStaysAliveThroughTheMacro) {
  const std::string long_text(200, 'x');
  auto fails = [&] { return IoError("{}", long_text); };
  auto fails_result = [&]() -> Result<int> { return IoError("{}", long_text); };
  auto via_status = [&]() -> Status {
    SLUICE_RETURN_IF_ERROR(fails().WithContext("writing extent 3"));
    return OkStatus();
  };
  auto via_result = [&]() -> Status {
    SLUICE_RETURN_IF_ERROR(fails_result().WithContext("reading header"));
    return OkStatus();
  };
  auto via_status_of_result = [&]() -> Status {
    SLUICE_RETURN_IF_ERROR(fails_result().status());
    return OkStatus();
  };
  EXPECT_EQ(via_status().message(), "writing extent 3: " + long_text);
  EXPECT_EQ(via_result().message(), "reading header: " + long_text);
  EXPECT_EQ(via_status_of_result().message(), long_text);
}

TEST_F(ResultDeathTest, OkStatusWithoutValueAborts) {
  EXPECT_DEATH(Result<int>{OkStatus()}, "Result constructed from an OK status without a value");
}

TEST_F(ResultDeathTest, ValueOfAnErrorAbortsWithTheError) {
  Result<int> error = UnavailableError("no GPU on this machine");
  EXPECT_DEATH((void)error.value(),
               "Result::value\\(\\) on error: Unavailable: no GPU on this machine");
}

}  // namespace
}  // namespace sluice
