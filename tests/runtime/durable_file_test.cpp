#include "runtime/durable_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::filesystem::path Scratch(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::filesystem::path(::testing::TempDir()) /
         (std::string("sluice_durable_") + info->name() + "_" + name);
}

TEST(CreateDirectoriesTest, MakesMissingParentsAndAcceptsAnExistingDirectory) {
  const std::filesystem::path root = Scratch("tree");
  ASSERT_TRUE(RemoveTree(root).ok());
  const std::filesystem::path leaf = root / "a" / "b";
  ASSERT_TRUE(CreateDirectories(leaf).ok());
  EXPECT_TRUE(std::filesystem::is_directory(leaf));
  EXPECT_TRUE(CreateDirectories(leaf).ok());
  EXPECT_TRUE(RemoveTree(root).ok());
}

TEST(CreateDirectoriesTest, ANonDirectoryInTheWayNamesThePathTheReasonAndTheRemedy) {
  const std::filesystem::path file = Scratch("file");
  std::ofstream(file) << "x";
  const Status status = CreateDirectories(file / "sub", "set run.dir elsewhere");
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_THAT(status.message(), HasSubstr((file / "sub").string()));
  EXPECT_THAT(status.message(), HasSubstr("Not a directory"));
  EXPECT_THAT(status.message(), HasSubstr("; set run.dir elsewhere"));
  EXPECT_THAT(CreateDirectories(file / "sub").message(), Not(HasSubstr(";")));
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace sluice
