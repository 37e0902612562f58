#include "runtime/check.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

class CheckDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST(CheckTest, PassingCheckDoesNotEvaluateTheMessage) {
  int evaluated = 0;
  auto message = [&evaluated] {
    ++evaluated;
    return std::string("never built");
  };
  SLUICE_CHECK(1 + 1 == 2) << message();
  SLUICE_CHECK_EQ(3, 3) << message();
  SLUICE_CHECK_LT(1, 2) << message();
  SLUICE_CHECK_GE(2, 2) << message();
  EXPECT_EQ(evaluated, 0);
}

TEST_F(CheckDeathTest, FailingCheckPrintsFileLineConditionAndMessage) {
  int shards = 3;
  EXPECT_DEATH(SLUICE_CHECK(shards % 2 == 0) << "shards must be even, got " << shards,
               "check_test\\.cpp:[0-9]+: CHECK failed: shards % 2 == 0 shards must be even, "
               "got 3");
}

TEST_F(CheckDeathTest, ComparisonChecksPrintBothValues) {
  int expected = 4;
  int got = 3;
  EXPECT_DEATH(SLUICE_CHECK_EQ(got, expected) << "ranks",
               "CHECK failed: \\(got\\)==\\(expected\\) "
               "\\(3 vs 4\\) ranks");
  EXPECT_DEATH(SLUICE_CHECK_LT(expected, got), "\\(4 vs 3\\)");
  EXPECT_DEATH(SLUICE_CHECK_NE(got, 3), "\\(3 vs 3\\)");
}

TEST(CheckTest, DebugCheckFollowsNdebug) {
  int evaluated = 0;
  SLUICE_DCHECK(++evaluated > 0);
#ifdef NDEBUG
  EXPECT_EQ(evaluated, 0);  // compiled out of release builds: the condition is not run
#else
  EXPECT_EQ(evaluated, 1);
#endif
}

}  // namespace
}  // namespace sluice
