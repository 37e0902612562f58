#include "runtime/logging.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace sluice {
namespace {

// Logging state is process-wide: every test starts from "info" on rank 0 of 1 and restores it.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override { Reset(); }
  void TearDown() override { Reset(); }
  static void Reset() {
    ASSERT_TRUE(SetLogSpec("info").ok());
    SetLogRank(0, 1);
  }
};

TEST_F(LoggingTest, ParsesEveryLevelName) {
  struct Case {
    const char* name;
    LogLevel level;
  };
  for (Case c : {Case{"trace", LogLevel::kTrace}, Case{"debug", LogLevel::kDebug},
                 Case{"info", LogLevel::kInfo}, Case{"warn", LogLevel::kWarn},
                 Case{"warning", LogLevel::kWarn}, Case{"error", LogLevel::kError},
                 Case{"off", LogLevel::kOff}}) {
    Result<LogLevel> level = ParseLogLevel(c.name);
    ASSERT_TRUE(level.ok()) << c.name;
    EXPECT_EQ(*level, c.level) << c.name;
  }
  Result<LogLevel> bad = ParseLogLevel("verbose");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'verbose'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("trace, debug, info, warn, error or off"),
            std::string::npos);
}

TEST_F(LoggingTest, SpecSetsDefaultAndPerSubsystemLevels) {
  ASSERT_TRUE(SetLogSpec("warn,aio=debug,comm=trace").ok());
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo, "engine"));
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn, "engine"));
  EXPECT_TRUE(LogEnabled(LogLevel::kError, "engine"));
  EXPECT_TRUE(LogEnabled(LogLevel::kDebug, "aio"));
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo, "aio"));
  EXPECT_FALSE(LogEnabled(LogLevel::kTrace, "aio"));
  EXPECT_TRUE(LogEnabled(LogLevel::kTrace, "comm"));
  // Subsystem names match exactly, not by prefix.
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug, "aio_ring"));
}

TEST_F(LoggingTest, SpecReplacesThePreviousFilter) {
  ASSERT_TRUE(SetLogSpec("info,aio=debug").ok());
  EXPECT_TRUE(LogEnabled(LogLevel::kDebug, "aio"));
  ASSERT_TRUE(SetLogSpec("info").ok());
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug, "aio"));
  // Only subsystems: the default level stays.
  ASSERT_TRUE(SetLogSpec("comm=error").ok());
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo, "engine"));
  EXPECT_FALSE(LogEnabled(LogLevel::kWarn, "comm"));
}

TEST_F(LoggingTest, BadSpecIsAnErrorAndLeavesTheFilterAlone) {
  ASSERT_TRUE(SetLogSpec("warn,aio=debug").ok());
  for (const char* spec : {"loud", "info,aio=chatty", "aio=debug,comm="}) {
    Status status = SetLogSpec(spec);
    EXPECT_FALSE(status.ok()) << spec;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(status.message().find("unknown log level"), std::string::npos) << spec;
  }
  EXPECT_NE(SetLogSpec("info,aio=chatty").message().find("'chatty'"), std::string::npos);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo, "engine"));
  EXPECT_TRUE(LogEnabled(LogLevel::kDebug, "aio"));
}

TEST_F(LoggingTest, OffSilencesEverything) {
  ASSERT_TRUE(SetLogSpec("off").ok());
  EXPECT_FALSE(LogEnabled(LogLevel::kError, "engine"));
  ASSERT_TRUE(SetLogSpec("trace").ok());
  EXPECT_TRUE(LogEnabled(LogLevel::kTrace, "engine"));
  EXPECT_FALSE(LogEnabled(LogLevel::kOff, "engine"));  // kOff is a threshold, not a level
}

TEST_F(LoggingTest, SetLogLevelOverridesOneSubsystem) {
  SetLogLevel("nvme", LogLevel::kTrace);
  EXPECT_TRUE(LogEnabled(LogLevel::kTrace, "nvme"));
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug, "engine"));
  SetLogLevel(LogLevel::kError);
  EXPECT_FALSE(LogEnabled(LogLevel::kWarn, "engine"));
  EXPECT_TRUE(LogEnabled(LogLevel::kTrace, "nvme"));
}

TEST_F(LoggingTest, FilteredMessagesAreNotFormatted) {
  ASSERT_TRUE(SetLogSpec("warn").ok());
  int formatted = 0;
  auto expensive = [&formatted] {
    ++formatted;
    return 1;
  };
  ::testing::internal::CaptureStderr();
  SLUICE_LOG(kInfo, "engine", "value {}", expensive());
  std::string output = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(formatted, 0);
  EXPECT_EQ(output, "");
}

TEST_F(LoggingTest, LineCarriesRankLevelTimeSubsystemAndMessage) {
  SetLogRank(1, 4);
  ::testing::internal::CaptureStderr();
  SLUICE_LOG(kWarn, "aio", "opened {} files", 2);
  std::string output = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(std::regex_match(
      output, std::regex(R"(\[rank 1/4\] W \d\d:\d\d:\d\d\.\d\d\d aio: opened 2 files\n)")))
      << output;
}

TEST_F(LoggingTest, LogOncePrintsOnlyTheFirstTime) {
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) SLUICE_LOG_ONCE(kInfo, "config", "deprecated key, pass {}", i);
  std::string output = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(output.find("config: deprecated key, pass 0\n"), std::string::npos) << output;
  EXPECT_EQ(output.find("pass 1"), std::string::npos) << output;
  EXPECT_EQ(output.find("pass 2"), std::string::npos) << output;
}

}  // namespace
}  // namespace sluice
