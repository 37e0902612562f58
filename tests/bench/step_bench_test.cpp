#include "benchmarks/lib/step_bench.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace sluice::bench {
namespace {

namespace fs = std::filesystem;

// A tiny ZeRO-3 llama whose optimizer state lives on NVMe (a scratch directory) in several tiles,
// trained on a text file of its own.
class StepBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    dir_ =
        fs::path(tmp != nullptr ? tmp : "/tmp") / ("step_bench_test." + std::to_string(getpid()));
    fs::create_directories(dir_ / "nvme");
    std::ofstream(dir_ / "corpus.txt") << std::string(20000, 'a') + "the quick brown fox\n";
    std::ofstream(dir_ / "tiny.yaml") << R"(train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 2
optimizer: {type: adamw, params: {lr: 1e-3}}
zero_optimization:
  stage: 3
  sub_group_size: 8192
  reduce_bucket_size: 1e5
  offload_optimizer: {device: nvme, nvme_path: )"
                                      << (dir_ / "nvme").string() << R"(}
model: {family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 64, seq_len: 32,
        vocab_size: 256, dtype: f32}
data: {train_path: )" << (dir_ / "corpus.txt").string()
                                      << R"(, format: text}
device: {type: cpu, memory_limit: 64MiB, host_memory_limit: 1GiB}
run: {dir: )" << (dir_ / "run").string()
                                      << "}\n";
    options_.configs = {(dir_ / "tiny.yaml").string()};
    options_.steps = 3;
    options_.warmup = 1;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  StepBenchOptions options_;
};

TEST_F(StepBenchTest, CommandReportsEveryPhaseAndWritesTraceWithLanes) {
  options_.json_path = (dir_ / "step.json").string();
  options_.trace_path = (dir_ / "trace.json").string();
  ASSERT_TRUE(RunStepBenchCommand(options_).ok());

  const nlohmann::json record = nlohmann::json::parse(std::ifstream(options_.json_path));
  for (const char* key : {"machine", "config", "settings", "results"}) {
    EXPECT_TRUE(record.contains(key)) << key;
  }
  EXPECT_EQ(record["settings"]["offload_optimizer"], "nvme");
  const nlohmann::json& results = record["results"];
  ASSERT_EQ(results["samples"].size(), 3u);

  for (const nlohmann::json& sample : results["samples"]) {
    double sum = 0;
    for (const char* phase : kStepPhases) {
      const double t = sample["phases_s"][phase].get<double>();
      EXPECT_GE(t, 0) << phase;
      sum += t;
    }
    for (const char* phase :
         {"forward", "backward", "gather", "reduce", "nvme_read", "nvme_write", "adam"}) {
      EXPECT_GT(sample["phases_s"][phase].get<double>(), 0) << phase;
    }
    const double wall = sample["wall_s"].get<double>();
    ASSERT_GT(wall, 0);
    EXPECT_NEAR(sample["overlap_efficiency"].get<double>(), sum / wall, 1e-9 * sum / wall);
    const nlohmann::json& opt = sample["optimizer"];
    const double nvme = sample["phases_s"]["nvme_read"].get<double>() +
                        sample["phases_s"]["nvme_write"].get<double>();
    EXPECT_DOUBLE_EQ(opt["nvme_s"].get<double>(), nvme);
    EXPECT_NEAR(
        opt["ratio"].get<double>(),
        opt["wall_s"].get<double>() / std::max(nvme, sample["phases_s"]["adam"].get<double>()),
        1e-9);
    // The engine began reading the first tiles' state while the passes computed.
    EXPECT_GT(opt["prefetched_tiles"].get<int64_t>(), 0);
    // The optimizer step's own parts cannot exceed it, nor it the whole step.
    EXPECT_LE(opt["adam_s"].get<double>(), opt["wall_s"].get<double>());
    EXPECT_LE(opt["wall_s"].get<double>(), wall);
  }

  // The headline: the whole step against the same config without offload, in the same run.
  const nlohmann::json& whole = results["whole_step"];
  ASSERT_TRUE(whole.contains("ratio")) << whole.dump();
  EXPECT_EQ(whole["wall_s"].get<double>(), results["wall_s"].get<double>());
  EXPECT_GT(whole["no_offload_wall_s"].get<double>(), 0);
  EXPECT_NEAR(whole["ratio"].get<double>(),
              whole["wall_s"].get<double>() / whole["no_offload_wall_s"].get<double>(), 1e-12);
  EXPECT_EQ(whole["target"].get<double>(), 1.2);

  // The passes against the baseline's, and the CPU per step by thread: the stream that ran the
  // passes is there, and the total is the threads' sum.
  const nlohmann::json& compute = results["compute"];
  EXPECT_NEAR(compute["ratio"].get<double>(),
              compute["forward_backward_s"].get<double>() /
                  compute["no_offload_forward_backward_s"].get<double>(),
              1e-12);
  for (const char* key : {"cpu_per_step", "no_offload_cpu_per_step"}) {
    const nlohmann::json& cpu = results[key];
    double threads_sum = 0;
    bool stream_worker = false;
    for (const nlohmann::json& use : cpu["by_thread"]) {
      threads_sum += use["cpu_s"].get<double>();
      stream_worker = stream_worker || use["name"].get<std::string>().starts_with("sluice-c");
    }
    EXPECT_GT(cpu["total_s"].get<double>(), 0) << key;
    EXPECT_NEAR(cpu["total_s"].get<double>(), threads_sum, 1e-9) << key;
    EXPECT_TRUE(stream_worker) << key << ": " << cpu.dump();
  }

  // The medians' efficiency is computed from the median phases and wall, as reported.
  double median_sum = 0;
  for (const char* phase : kStepPhases) median_sum += results["phases_s"][phase].get<double>();
  EXPECT_NEAR(results["overlap_efficiency"].get<double>(),
              median_sum / results["wall_s"].get<double>(), 1e-9);

  const nlohmann::json trace = nlohmann::json::parse(std::ifstream(options_.trace_path));
  const nlohmann::json& events = trace.is_object() ? trace["traceEvents"] : trace;
  std::set<std::string> lanes_with_events;
  std::map<int, std::string> lane_of_tid;
  for (const nlohmann::json& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      lane_of_tid[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
  }
  for (const nlohmann::json& e : events) {
    if (e.value("ph", "") == "X") lanes_with_events.insert(lane_of_tid[e["tid"].get<int>()]);
  }
  for (const char* lane : {"compute", "comm", "nvme", "cpu_adam", "d2h", "h2d"}) {
    EXPECT_TRUE(lanes_with_events.contains(lane)) << lane;
  }
}

// With the parameters on NVMe too, the gathers' reads count as NVMe reads of the step but not of
// the optimizer step, whose ratio they must not distort.
TEST_F(StepBenchTest, ParameterReadsOfTheGathersAreNvmeReadsOutsideTheOptimizerStep) {
  options_.json_path = (dir_ / "step.json").string();
  options_.set_overrides = {"zero_optimization.offload_param.device=nvme",
                            "zero_optimization.offload_param.nvme_path=" + (dir_ / "nvme").string(),
                            "zero_optimization.offload_param.max_in_cpu=0"};
  ASSERT_TRUE(RunStepBenchCommand(options_).ok());
  const nlohmann::json record = nlohmann::json::parse(std::ifstream(options_.json_path));
  for (const nlohmann::json& sample : record["results"]["samples"]) {
    const double param_reads = sample["param_nvme_read_s"].get<double>();
    const double reads = sample["phases_s"]["nvme_read"].get<double>();
    EXPECT_GT(param_reads, 0);
    EXPECT_GT(reads, param_reads) << "the optimizer's own tile reads are in nvme_read too";
    EXPECT_NEAR(sample["optimizer"]["nvme_s"].get<double>(),
                reads - param_reads + sample["phases_s"]["nvme_write"].get<double>(), 1e-12);
  }
}

// `--json -`: stdout carries the record alone (the table goes to stderr), so it can be piped.
TEST_F(StepBenchTest, JsonToStdoutKeepsStdoutParseable) {
  options_.json_path = "-";
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const Status status = RunStepBenchCommand(options_);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(status.ok()) << status.ToString();
  const nlohmann::json record = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(record.is_discarded()) << out;
  EXPECT_EQ(record["benchmark"], "step");
  EXPECT_NE(err.find("engine step"), std::string::npos) << err;
}

TEST_F(StepBenchTest, WithoutTheBaselineTheHeadlineSaysWhy) {
  options_.baseline = false;
  const Result<StepBenchReport> report = RunStepBench(options_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->offloaded);
  EXPECT_FALSE(report->baseline_measured);
  EXPECT_EQ(report->whole_step_ratio(), 0);
  EXPECT_NE(FormatStepBenchTable(*report).find("not measured (--no-baseline)"), std::string::npos)
      << FormatStepBenchTable(*report);
  EXPECT_EQ(StepBenchJson(*report)["results"]["whole_step"]["not_measured"], "--no-baseline");
}

TEST_F(StepBenchTest, RefusesZeroSteps) {
  options_.steps = 0;
  const Result<StepBenchReport> report = RunStepBench(options_);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::bench
