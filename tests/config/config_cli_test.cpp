// Runs the built `sluice config check` / `sluice config help` and checks exit codes and output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/size_format.h"
#include "tests/common/run_command.h"

namespace {

using sluice::test_cli::CommandResult;
using sluice::test_cli::RunSluice;
using sluice::test_cli::SourcePath;

std::string WriteTemp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigCliTest, AcceptsAGoodFileAndPrintsTheResolvedConfig) {
  CommandResult r =
      RunSluice("config check " + SourcePath("configs/default.yaml") + " --world-size 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("for world size 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train_batch_size: 16"), std::string::npos) << r.output;
}

TEST(ConfigCliTest, SetOverridesAndJson) {
  CommandResult r = RunSluice("config check " + SourcePath("configs/default.yaml") +
                              " --set zero_optimization.stage=2 --set run.steps=7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"zero_optimization.stage\": {\n      \"value\": 2,\n      \"source\": "
                          "\"--set\""),
            std::string::npos)
      << r.output;
}

TEST(ConfigCliTest, RejectsABadFileWithExitCodeOne) {
  std::string path =
      WriteTemp("bad_config.yaml", "train_batch_size: 8\nzero_optimization:\n  stage: 4\n");
  CommandResult r = RunSluice("config check " + path);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bad_config.yaml:3:3: zero_optimization.stage: 4 is out of range"),
            std::string::npos)
      << r.output;
}

// --all: every key Sluice will not run, one per line, instead of the first only.
TEST(ConfigCliTest, AllListsEveryProblemAtOnce) {
  std::string path =
      WriteTemp("migrate.json",
                "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"OneBitLamb\", \"params\": "
                "{\"max_coeff\": 0.3}}, \"sparse_gradients\": true, \"zero_optimization\": "
                "{\"stage\": 2, \"mics_shard_size\": 8}}");
  CommandResult first = RunSluice("config check " + path);
  EXPECT_EQ(first.exit_code, 1) << first.output;
  EXPECT_EQ(first.output.find("sparse_gradients"), std::string::npos) << first.output;
  CommandResult all = RunSluice("config check --all " + path);
  EXPECT_EQ(all.exit_code, 1) << all.output;
  EXPECT_NE(all.output.find("3 settings Sluice will not run as given"), std::string::npos)
      << all.output;
  for (const char* key : {"optimizer.type: \"OneBitLamb\"", "sparse_gradients",
                          "zero_optimization.mics_shard_size"}) {
    EXPECT_NE(all.output.find(key), std::string::npos) << key << "\n" << all.output;
  }
  // A config without problems prints the resolved config, as without --all.
  CommandResult good =
      RunSluice("config check --all " + SourcePath("configs/ds_config_zero3.json"));
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_NE(good.output.find("train_batch_size: 8"), std::string::npos) << good.output;
}

TEST(ConfigCliTest, RejectsABadOverride) {
  CommandResult r =
      RunSluice("config check " + SourcePath("configs/default.yaml") + " --set bf16.enabeld=true");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("unknown key bf16.enabeld (did you mean bf16.enabled?)"),
            std::string::npos)
      << r.output;
}

TEST(ConfigCliTest, MissingFileFails) {
  CommandResult r = RunSluice("config check /nonexistent/config.yaml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
}

TEST(ConfigCliTest, HelpListsSettings) {
  CommandResult r = RunSluice("config help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("zero_optimization.offload_param.buffer_size"), std::string::npos);
  r = RunSluice("config help --markdown");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| `aio.block_size` |"), std::string::npos);
}

TEST(ConfigCliTest, LayersFilesInOrderAndNamesWhereEachValueCameFrom) {
  std::string overlay = WriteTemp("layer_overlay.yaml", "run:\n  steps: 7\n");
  for (const std::string& files :
       {SourcePath("configs/default.yaml") + " " + overlay,
        "--config " + SourcePath("configs/default.yaml") + " --config " + overlay}) {
    CommandResult r = RunSluice("config check " + files);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("steps: 7"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("# file " + overlay + ":2:3"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" + " + overlay), std::string::npos) << r.output;
  }
  CommandResult r =
      RunSluice("config check " + overlay + " --config " + SourcePath("configs/default.yaml"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("not both"), std::string::npos) << r.output;

  r = RunSluice("config check --config " + SourcePath("configs/default.yaml") +
                " --config /nonexistent/second.yaml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--config #2 of 2: config file /nonexistent/second.yaml does not exist"),
            std::string::npos)
      << r.output;
}

// `sluice bench aio --tune` on a small file in a temporary directory, then its snippet layered
// over the shipped NVMe config and over the DeepSpeed JSON config: accepted as it is, and the
// tuned keys come from the snippet while the rest of `aio` stays the base's.
TEST(ConfigCliTest, TunedAioSnippetIsAcceptedAsALayerAndWins) {
  std::string dir = ::testing::TempDir() + "sluice_aio_tune_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string snippet = dir + "/aio_tuned.yaml";
  CommandResult tune = RunSluice("bench aio --tune " + dir + " --size 4M --output " + snippet);
  ASSERT_EQ(tune.exit_code, 0) << tune.output;
  std::ifstream in(snippet);
  ASSERT_TRUE(in) << "no snippet written: " << tune.output;
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("# A config layer"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("sluice train --config base.yaml --config aio_tuned.yaml"),
            std::string::npos)
      << text.str();

  // The values the tuning chose, read from the snippet's lines.
  auto value_of = [&](const std::string& key) {
    size_t at = text.str().find("\n  " + key + ": ");
    EXPECT_NE(at, std::string::npos) << key << " missing:\n" << text.str();
    if (at == std::string::npos) return std::string();
    size_t start = at + key.size() + 5;
    return text.str().substr(start, text.str().find('\n', start) - start);
  };
  sluice::Result<uint64_t> block_size = sluice::ParseByteSize(value_of("block_size"));
  ASSERT_TRUE(block_size.ok()) << block_size.status().ToString();
  const int queue_depth = std::stoi(value_of("queue_depth"));
  const int intra_op = std::stoi(value_of("intra_op_parallelism"));

  for (const std::string& base : {SourcePath("configs/zero3_offload_nvme.yaml"),
                                  SourcePath("configs/ds_config_zero3.json")}) {
    CommandResult r =
        RunSluice("config check --config " + base + " --config " + snippet + " --json");
    ASSERT_EQ(r.exit_code, 0) << base << ":\n" << r.output;
    // Log lines (notes on stderr) come before the record.
    size_t start = r.output.find("{\n");
    ASSERT_NE(start, std::string::npos) << r.output;
    nlohmann::json record = nlohmann::json::parse(r.output.substr(start), nullptr, false);
    ASSERT_FALSE(record.is_discarded()) << r.output;
    const nlohmann::json& s = record["settings"];
    EXPECT_EQ(s["aio.block_size"]["value"].get<uint64_t>(), *block_size) << base;
    EXPECT_EQ(s["aio.queue_depth"]["value"].get<int>(), queue_depth) << base;
    EXPECT_EQ(s["aio.intra_op_parallelism"]["value"].get<int>(), intra_op) << base;
    for (const char* key : {"aio.block_size", "aio.queue_depth", "aio.intra_op_parallelism"}) {
      EXPECT_EQ(s[key]["origin"].get<std::string>().rfind(snippet + ":", 0), 0u)
          << base << " " << key << ": " << s[key].dump();
    }
    EXPECT_EQ(s["aio.overlap_events"]["origin"].get<std::string>().rfind(base + ":", 0), 0u)
        << base << ": " << s["aio.overlap_events"].dump();
    EXPECT_EQ(s["zero_optimization.stage"]["value"], 3) << base;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
