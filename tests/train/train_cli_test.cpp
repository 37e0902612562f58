// `sluice train` end to end: the built binary on tiny configs, its exit codes, output and files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/common/run_command.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_cli::CommandResult;
using test_cli::RunSluice;

using test_util::TempPath;
using test_util::WriteFile;

size_t CountLines(const std::string& path) {
  std::ifstream in(path);
  size_t lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;
  return lines;
}

std::string Corpus() {
  return WriteFile(TempPath("corpus.txt"), test_util::SyntheticCorpus(32768));
}

// `sluice env` names the OpenBLAS kernel and the GEMM a run would get: the setting's default, or
// the environment's override, and what each choice runs on this machine.
TEST(EnvCliTest, NamesTheBlasCoreAndTheGemmSetting) {
  CommandResult r = RunSluice("env --json", "env -u SLUICE_CFG_DEVICE__CPU_GEMM",
                              /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json env = nlohmann::json::parse(r.output);
  const nlohmann::json& gemm = env["gemm"];
  EXPECT_FALSE(gemm["openblas"]["core"].get<std::string>().empty()) << gemm.dump();
  EXPECT_EQ(gemm["cpu_gemm"]["value"], "deterministic") << gemm.dump();
  EXPECT_EQ(gemm["cpu_gemm"]["source"], "default");
  // blas: the library blas runs here (oneDNN where built, else OpenBLAS on the core `openblas`
  // names), with its version, kernel family and threads.
  const nlohmann::json& blas = gemm["backends"]["blas"];
  EXPECT_EQ(gemm["cpu_gemm"]["kernels"]["blas"], blas["name"]) << gemm.dump();
  EXPECT_TRUE(blas["library"] == "oneDNN" || blas["library"] == "OpenBLAS") << gemm.dump();
  EXPECT_EQ(blas["name"].get<std::string>(),
            blas["library"].get<std::string>() + " " + blas["version"].get<std::string>() + " " +
                blas["core"].get<std::string>());
  if (blas["library"] == "OpenBLAS") {
    EXPECT_EQ(blas["core"], gemm["openblas"]["core"]);
  }
  EXPECT_GE(blas["threads"].get<int>(), 1);
  EXPECT_FALSE(gemm["openblas"]["picked"].get<std::string>().empty()) << gemm.dump();
  EXPECT_FALSE(gemm["openblas"]["reason"].get<std::string>().empty()) << gemm.dump();
  EXPECT_EQ(gemm["backends"]["deterministic"]["library"], "GemmFixed");
  EXPECT_EQ(gemm["cpu_gemm"]["kernels"]["deterministic"],
            "GemmFixed " + env["cpu"]["kernel_isa"].get<std::string>());

  r = RunSluice("env", "SLUICE_CFG_DEVICE__CPU_GEMM=blas");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OpenBLAS       core "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CPU GEMM       device.cpu_gemm blas "
                          "(SLUICE_CFG_DEVICE__CPU_GEMM): " +
                          gemm["cpu_gemm"]["kernels"]["blas"].get<std::string>() + ";"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Device memory  protection "), std::string::npos) << r.output;
}

TEST(TrainCliTest, TrainsATinyConfigAndWritesItsFiles) {
  const std::string run_dir = TempPath("run");
  std::filesystem::remove_all(run_dir);  // an earlier run's final checkpoint claims the dir
  const std::string config =
      WriteFile(TempPath("tiny.yaml"), test_util::TinyGptYaml(Corpus(), "runs/unused"));
  CommandResult r = RunSluice("train --config " + config + " --run-dir " + run_dir +
                              " --set run.steps=8 --set run.eval_interval=4 --progress plain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 8/8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Training summary (" + run_dir + ")"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokens/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("validation loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory: peak of the run against `sluice estimate` (stage 0, 1 rank)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(CountLines(run_dir + "/metrics.jsonl"), 8u);
  EXPECT_TRUE(std::filesystem::exists(run_dir + "/summary.json"));
  std::ifstream resolved(run_dir + "/config.resolved.json");
  std::string text((std::istreambuf_iterator<char>(resolved)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(run_dir), std::string::npos) << "--run-dir is recorded as run.dir";
}

// ZeRO-Infinity through the CLI: Adam state on NVMe, parameters in host memory; the summary's
// memory table and summary.json show every tier, predicted against measured.
TEST(TrainCliTest, OffloadedRunReportsEveryTier) {
  const std::string run_dir = TempPath("run");
  std::filesystem::remove_all(run_dir);  // an earlier run's final checkpoint claims the dir
  const std::string swap = TempPath("swap");
  std::filesystem::create_directories(swap);
  const std::string config =
      WriteFile(TempPath("tiny.yaml"), test_util::TinyGptYaml(Corpus(), "runs/unused"));
  CommandResult r = RunSluice("train --config " + config + " --run-dir " + run_dir +
                              " --set run.steps=3 --set run.eval_interval=0 --progress plain --set "
                              "zero_optimization.stage=3"
                              " --set zero_optimization.offload_optimizer.device=nvme --set "
                              "zero_optimization.offload_optimizer.nvme_path=" +
                              swap + " --set zero_optimization.offload_param.device=cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 3/3"), std::string::npos) << r.output;
  for (const char* tier : {"\n  device ", "\n  host_pinned ", "\n  host ", "\n  nvme "}) {
    EXPECT_NE(r.output.find(tier), std::string::npos) << tier << "\n" << r.output;
  }
  std::ifstream in(run_dir + "/summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(summary.is_discarded());
  std::set<std::string> tiers;
  for (const nlohmann::json& row : summary["memory"]["rows"]) {
    if (row["category"] == "optimizer" && row["tier"] == "nvme") {
      EXPECT_GT(row["measured"].get<int64_t>(), 0) << row.dump();
      EXPECT_GT(row["predicted"].get<int64_t>(), 0) << row.dump();
    }
    if (row["category"] == "optimizer" && row["tier"] == "device") {
      EXPECT_EQ(row["measured"].get<int64_t>(), 0) << row.dump();
    }
    tiers.insert(row["tier"].get<std::string>());
  }
  EXPECT_EQ(tiers, (std::set<std::string>{"device", "host_pinned", "host", "nvme"}))
      << summary["memory"].dump(2);
}

TEST(TrainCliTest, PlainDeepSpeedConfigWithAModelFile) {
  const std::string ds_config = WriteFile(TempPath("ds_config.json"), R"({
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}},
    "zero_optimization": {"stage": 2},
    "bf16": {"enabled": true}
  })");
  const std::string model =
      WriteFile(TempPath("model.yaml"),
                "family: llama\nn_layer: 1\nn_head: 2\nd_model: 32\nd_ff: 64\nseq_len: 16\n");
  std::filesystem::remove_all(TempPath("run"));  // an earlier run's final checkpoint
  CommandResult r = RunSluice("train --config " + ds_config + " --model " + model +
                              " --set data.train_path=" + Corpus() +
                              " --set device.type=cpu --set device.memory_limit=32MiB"
                              " --set run.steps=3 --progress off --run-dir " +
                              TempPath("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("llama"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;
  EXPECT_EQ(CountLines(TempPath("run") + "/metrics.jsonl"), 3u);
}

TEST(TrainCliTest, MissingDataFileIsAClearError) {
  const std::string config =
      WriteFile(TempPath("tiny.yaml"),
                test_util::TinyGptYaml("/nonexistent/dir/corpus.txt", TempPath("run")));
  CommandResult r = RunSluice("train --config " + config);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/dir/corpus.txt"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Training summary"), std::string::npos) << r.output;
}

TEST(TrainCliTest, NoModelAnywhereIsAClearError) {
  const std::string ds_config =
      WriteFile(TempPath("ds_config.json"), R"({"train_micro_batch_size_per_gpu": 2})");
  CommandResult r = RunSluice("train --config " + ds_config + " --set data.train_path=x.txt");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no model section"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--model FILE"), std::string::npos) << r.output;
}

TEST(TrainCliTest, ConfigIsRequiredAndHelpConfigListsSettings) {
  CommandResult missing = RunSluice("train");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("--config"), std::string::npos) << missing.output;
  CommandResult help = RunSluice("train --help-config");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  for (const char* key : {"zero_optimization.stage", "run.eval_interval", "fp16.hysteresis"}) {
    EXPECT_NE(help.output.find(key), std::string::npos) << key;
  }
}

}  // namespace
}  // namespace sluice::train
