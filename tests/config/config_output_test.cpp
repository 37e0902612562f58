// What is printed from the registry: --help-config, the Markdown table, the record, the listing.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config_test_util.h"

namespace sluice {
namespace {

using testing::MustLoadYaml;

TEST(ConfigOutputTest, HelpTextListsEverySettingWithTypeDefaultDocAndEnv) {
  std::string help = HelpConfigText();
  for (const SettingSpec& spec : ConfigRegistry().settings()) {
    EXPECT_NE(help.find("  " + spec.path + " ("), std::string::npos) << spec.path;
    EXPECT_NE(help.find(spec.doc), std::string::npos) << spec.path;
    EXPECT_NE(help.find("env: " + spec.env_var), std::string::npos) << spec.path;
  }
  EXPECT_NE(help.find("zero_optimization.stage (int, default 0)"), std::string::npos);
  EXPECT_NE(help.find("aio.block_size (size, default 1MiB)"), std::string::npos);
  EXPECT_NE(help.find("env: SLUICE_CFG_ZERO_OPTIMIZATION__OFFLOAD_OPTIMIZER__PIN_MEMORY"),
            std::string::npos);
  EXPECT_NE(help.find("zero_optimization.overlap_comm (bool, default derived: true iff stage is 3"),
            std::string::npos);
}

TEST(ConfigOutputTest, MarkdownHasOneRowPerSetting) {
  std::string md = HelpConfigMarkdown();
  size_t rows = 0;
  std::istringstream lines(md);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) == 0) ++rows;
  }
  EXPECT_EQ(rows, ConfigRegistry().settings().size());
  EXPECT_NE(md.find("| `aio.queue_depth` | int | 8 | an integer 1 to 4096 |"), std::string::npos);
}

TEST(ConfigOutputTest, DocsTableIsUpToDate) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_NE(doc.str().find(HelpConfigMarkdown()), std::string::npos)
      << "regenerate the table: sluice config help --markdown";
}

TEST(ConfigOutputTest, RecordHasEverySettingWithValueAndSource) {
  ConfigSources sources = testing::IsolatedSources();
  sources.set_overrides = {"run.steps=5"};
  sources.world_size = 2;
  Config c = MustLoadYaml(
      "train_micro_batch_size_per_gpu: 4\ngradient_clipping: auto\naio: {thread_count: 3}\n",
      sources);
  nlohmann::ordered_json record = ConfigRecordJson(c);
  EXPECT_EQ(record["schema"], "sluice.config_record");
  EXPECT_EQ(record["version"], 1);
  EXPECT_EQ(record["world_size"], 2);
  const nlohmann::ordered_json& s = record["settings"];
  EXPECT_EQ(s.size(), ConfigRegistry().settings().size());
  EXPECT_EQ(s["train_batch_size"]["value"], 8);
  EXPECT_EQ(s["train_batch_size"]["source"], "derived");
  EXPECT_EQ(s["train_micro_batch_size_per_gpu"]["source"], "file");
  EXPECT_EQ(s["gradient_clipping"]["note"],
            "auto -> 1.0: the Hugging Face Trainer's max_grad_norm default");
  EXPECT_EQ(s["run.steps"]["source"], "--set");
  EXPECT_EQ(s["aio.intra_op_parallelism"]["value"], 3);
  EXPECT_EQ(s["zero_optimization.stage"]["source"], "default");
  EXPECT_EQ(record["notes"].size(), 1u);
}

TEST(ConfigOutputTest, TextListingShowsValuesAndSources) {
  Config c = MustLoadYaml(
      "train_batch_size: 8\nzero_optimization:\n  stage: 3\n"
      "device: {type: cpu, memory_limit: 256MiB}\n");
  std::string text = ConfigToText(c);
  EXPECT_NE(text.find("train_batch_size: 8"), std::string::npos);
  EXPECT_NE(text.find("zero_optimization:\n  stage: 3"), std::string::npos);
  EXPECT_NE(text.find("  overlap_comm: true"), std::string::npos);
  EXPECT_NE(text.find("# derived: true iff stage is 3 (stage is 3)"), std::string::npos);
  EXPECT_NE(text.find("  memory_limit: 256MiB"), std::string::npos);
  EXPECT_NE(text.find("  offload_optimizer:\n    device: none"), std::string::npos);
}

}  // namespace
}  // namespace sluice
