#include "benchmarks/lib/bench_record.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const fs::path& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

fs::path Scratch(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / (std::string("bench_record_") + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir / name;
}

TEST(BenchRecordTest, MedianOfOddEvenAndNone) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({}), 0);
}

TEST(BenchRecordTest, JsonToStdoutSendsTheTableToStderr) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const Status status = PrintTableAndWriteRecord("the table\n", {{"figure", 1.5}}, "-");
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(nlohmann::json::parse(out)["figure"], 1.5);
  EXPECT_EQ(err, "the table\n");
}

TEST(BenchRecordTest, AFileIsReplacedWholeAndAFailedWriteKeepsTheOldRecord) {
  const fs::path path = Scratch("record.json");
  ::testing::internal::CaptureStdout();
  ASSERT_TRUE(PrintTableAndWriteRecord("t\n", {{"run", 1}}, path.string()).ok());
  ASSERT_TRUE(PrintTableAndWriteRecord("t\n", {{"run", 2}}, path.string()).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "t\nt\n");
  EXPECT_EQ(nlohmann::json::parse(ReadAll(path))["run"], 2);

  // The temporary file cannot be created (a non-empty directory has its name): the old record
  // stays.
  fs::create_directories(path.string() + ".tmp");
  std::ofstream(path.string() + ".tmp/keep") << "x";
  ::testing::internal::CaptureStdout();
  const Status failed = PrintTableAndWriteRecord("t\n", {{"run", 3}}, path.string());
  ::testing::internal::GetCapturedStdout();
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("writing the benchmark record"));
  EXPECT_THAT(failed.message(), HasSubstr(path.string()));
  EXPECT_EQ(nlohmann::json::parse(ReadAll(path))["run"], 2);
}

}  // namespace
}  // namespace sluice::bench
