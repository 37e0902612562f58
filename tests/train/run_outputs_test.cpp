// What a training run leaves in its run directory besides the metrics, under mpirun -np 1 and 2:
// model TFLOP/s and MFU in metrics.jsonl and summary.json, trace.json with every rank as its own
// Perfetto process, and loss.png drawn by the trainer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "tests/common/test_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using ::sluice::testing::TestWorld;

TEST(RunOutputsTest, FlopsTraceOfEveryRankAndLossPlot) {
  Comm& world = TestWorld();
  const int n = world.size();
  const std::string corpus =
      test_util::WriteFile(test_util::TempPath("corpus_rank" + std::to_string(world.rank())),
                           test_util::SyntheticCorpus(64 * 1024));
  // One run directory for the job, another for each world size (ctest runs them side by side).
  const std::string run_dir = test_util::TempPath("run_np" + std::to_string(n));
  if (world.rank() == 0) std::filesystem::remove_all(run_dir);
  ASSERT_TRUE(world.Barrier().ok());
  const Config config = test_util::LoadTestConfig(
      test_util::TinyGptYaml(corpus, run_dir),
      {"run.steps=4", "run.eval_interval=2", "run.trace=true", "zero_optimization.stage=2"});
  TrainerOptions options;
  options.world = &world;
  options.progress = ProgressMode::kOff;
  options.summary_stream = nullptr;
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  Result<TrainSummary> summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_TRUE(world.Barrier().ok());
  if (world.rank() != 0) return;

  // The tiny GPT (2 layers, d_model 32, d_ff 128, 256 bytes, window 32): N = 2 x (4 x 32^2 + 2 x
  // 32 x 128) + 32 x 256 = 24576 + 8192 = 32768; 6N + 12 x 2 x 32 x 32 = 196608 + 24576.
  constexpr int64_t kFlopsPerToken = 221184;
  std::ifstream metrics_file(run_dir + "/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics_file, line)) {
    const nlohmann::json m = nlohmann::json::parse(line);
    ++lines;
    const double step_s = m["step_time_s"].get<double>();
    const double tokens = m["tokens"].get<double>();
    EXPECT_EQ(tokens, 4 * 32 * n);
    // The same quotient, up to the order of rounding.
    EXPECT_NEAR(m["tflops"].get<double>(), tokens * kFlopsPerToken / step_s * 1e-12,
                1e-9 * m["tflops"].get<double>());
    ASSERT_TRUE(m["mfu"].is_number()) << line;
    EXPECT_GT(m["mfu"].get<double>(), 0.0);
    EXPECT_LT(m["mfu"].get<double>(), 2.0);
  }
  EXPECT_EQ(lines, 4);

  std::ifstream summary_file(run_dir + "/summary.json");
  const nlohmann::json s = nlohmann::json::parse(summary_file);
  const nlohmann::json& f = s["flops"];
  EXPECT_EQ(f["per_token"], kFlopsPerToken);
  EXPECT_DOUBLE_EQ(f["model_flops"].get<double>(), 4.0 * 4 * 32 * n * kFlopsPerToken);
  EXPECT_GT(f["tflops"].get<double>(), 0.0);
  EXPECT_GT(f["mfu"].get<double>(), 0.0);
  EXPECT_EQ(f["peak"]["source"].get<std::string>().rfind("measured: ", 0), 0u) << f.dump();
  EXPECT_EQ(f["peak"]["dtype"], "f32");
  // The run's peak is the ranks' peaks summed.
  EXPECT_GE(f["peak"]["tflops_total"].get<double>(), f["peak"]["tflops_per_rank"].get<double>());

  std::ifstream trace_file(run_dir + "/trace.json");
  const nlohmann::json trace = nlohmann::json::parse(trace_file, nullptr, false);
  ASSERT_FALSE(trace.is_discarded()) << "trace.json is not valid JSON";
  std::map<int, int> forward;
  std::map<int, std::string> names;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    if (e["ph"] == "M" && e["name"] == "process_name") names[pid] = e["args"]["name"];
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("forward step", 0) == 0)
      ++forward[pid];
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(names[r], "rank " + std::to_string(r));
    EXPECT_EQ(forward[r], 4) << "rank " << r << ": one forward per step";
  }
  EXPECT_FALSE(std::filesystem::exists(run_dir + "/trace.rank0.json"));

  std::ifstream png(run_dir + "/loss.png", std::ios::binary);
  std::stringstream bytes;
  bytes << png.rdbuf();
  EXPECT_EQ(bytes.str().substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(bytes.str().size(), 1000u);
}

}  // namespace
}  // namespace sluice::train
