// Edit distance and the nearest name, and the message for a CLI11 parse that left arguments.
#include "cli/did_you_mean.h"

#include <gtest/gtest.h>

namespace sluice::cli {
namespace {

TEST(DidYouMeanTest, CountsEditsWithSwapsAsOne) {
  EXPECT_EQ(EditDistance("steps", "steps"), 0u);
  EXPECT_EQ(EditDistance("stpes", "steps"), 1u);
  EXPECT_EQ(EditDistance("trian", "train"), 1u);
  EXPECT_EQ(EditDistance("gem", "gemm"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

TEST(DidYouMeanTest, SuggestsOnlyACloseUniqueName) {
  const std::vector<std::string> names = {"train", "estimate", "launch", "convert", "env"};
  EXPECT_EQ(ClosestName("trian", names), "train");
  EXPECT_EQ(ClosestName("lanch", names), "launch");
  EXPECT_EQ(ClosestName("xyzzy", names), std::nullopt);
  EXPECT_EQ(ClosestName("--rnu-dir", {"--run-dir", "--resume"}), "--run-dir");
  // Two names equally near: no guess.
  EXPECT_EQ(ClosestName("ab", {"ax", "xb"}), std::nullopt);
}

TEST(DidYouMeanTest, DescribesWhatAParseLeftOver) {
  CLI::App app("test", "sluice");
  app.require_subcommand(1);
  CLI::App* train = app.add_subcommand("train", "");
  std::string dir;
  train->add_option("--run-dir", dir, "");
  app.add_subcommand("estimate", "");
  {
    const char* argv[] = {"sluice", "train", "--rnu-dir", "x"};
    EXPECT_THROW(app.parse(4, const_cast<char**>(argv)), CLI::ParseError);
    auto message = DescribeUnknownArguments(app);
    ASSERT_TRUE(message.has_value());
    EXPECT_EQ(*message, "unknown flag --rnu-dir for `sluice train`; did you mean --run-dir?");
  }
  app.clear();
  {
    const char* argv[] = {"sluice", "estimat"};
    EXPECT_THROW(app.parse(2, const_cast<char**>(argv)), CLI::ParseError);
    auto message = DescribeUnknownArguments(app);
    ASSERT_TRUE(message.has_value());
    EXPECT_EQ(*message, "unknown command 'estimat' for `sluice`; did you mean 'estimate'?");
  }
}

}  // namespace
}  // namespace sluice::cli
