// `tensorboard` and `csv_monitor` in a real run, under mpirun -np 1 and 2: rank 0 alone writes,
// one row / event per step at the samples seen, with the loss, rate and validation loss of
// metrics.jsonl; a run resumed from an earlier checkpoint continues the files without repeating
// a step (the CSV rows past the checkpoint dropped, TensorBoard's restart marker dropping the
// old events from there).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "tests/common/test_world.h"
#include "tests/train/tfevents_reader.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using ::sluice::testing::TestWorld;

constexpr int kSteps = 6;

struct StepRecord {
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  std::optional<double> val_loss;
};

// metrics.jsonl by step; a step written twice fails the test.
std::map<int64_t, StepRecord> ReadMetrics(const std::string& run_dir) {
  std::map<int64_t, StepRecord> steps;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json m = nlohmann::json::parse(line);
    StepRecord r{m["loss"].get<double>(), m["lr"].get<double>(), m["grad_norm"].get<double>(), {}};
    if (m.contains("val_loss")) r.val_loss = m["val_loss"].get<double>();
    EXPECT_TRUE(steps.emplace(m["step"].get<int64_t>(), r).second) << line;
  }
  return steps;
}

// A csv_monitor file: its header and its rows (step, value) in order.
std::pair<std::string, std::vector<std::pair<int64_t, double>>> ReadCsv(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path;
  std::string header;
  std::getline(in, header);
  std::vector<std::pair<int64_t, double>> rows;
  for (std::string line; std::getline(in, line);) {
    const size_t comma = line.find(',');
    rows.emplace_back(std::stoll(line.substr(0, comma)), std::stod(line.substr(comma + 1)));
  }
  return {header, rows};
}

// What TensorBoard shows for `dir`: its events files in name order, each SessionLog START
// dropping the scalars before it of steps from its step on (EventAccumulator's purge); by tag,
// (step, value) in order.
std::map<std::string, std::vector<std::pair<int64_t, float>>> TensorBoardView(const fs::path& dir,
                                                                              int* files) {
  std::vector<fs::path> paths;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  *files = static_cast<int>(paths.size());
  std::map<std::string, std::vector<std::pair<int64_t, float>>> view;
  for (const fs::path& path : paths) {
    EXPECT_TRUE(path.filename().string().starts_with("events.out.tfevents.")) << path;
    const std::vector<test_util::TfEvent> events = test_util::ReadTfEvents(path.string());
    EXPECT_GE(events.size(), 2u);
    if (!events.empty()) {
      EXPECT_EQ(events[0].file_version, "brain.Event:2") << path;
    }
    for (const test_util::TfEvent& e : events) {
      if (e.session_status == 1) {
        for (auto& [tag, points] : view) {
          std::erase_if(points, [&](const auto& p) { return p.first >= e.step; });
        }
      }
      for (const test_util::TfScalar& s : e.scalars) view[s.tag].emplace_back(e.step, s.value);
    }
  }
  return view;
}

// Rank 0's checks of both monitors against metrics.jsonl, after a run of kSteps steps of
// `batch` samples, whose first evaluation (before step 1) gave `initial_val_loss`;
// `tensorboard_files`: how many runs wrote events.
void CheckMonitors(const std::string& run_dir, const std::string& monitor_dir, int64_t batch,
                   double initial_val_loss, int tensorboard_files) {
  const std::map<int64_t, StepRecord> metrics = ReadMetrics(run_dir);
  ASSERT_EQ(metrics.size(), static_cast<size_t>(kSteps));

  const fs::path csv = fs::path(monitor_dir) / "csv";
  auto [loss_header, loss_rows] = ReadCsv(csv / "Train_Samples_train_loss.csv");
  EXPECT_EQ(loss_header, "step,train_loss");
  ASSERT_EQ(loss_rows.size(), static_cast<size_t>(kSteps));
  auto [lr_header, lr_rows] = ReadCsv(csv / "Train_Samples_lr.csv");
  EXPECT_EQ(lr_header, "step,lr");
  ASSERT_EQ(lr_rows.size(), static_cast<size_t>(kSteps));
  auto [norm_header, norm_rows] = ReadCsv(csv / "Train_Samples_grad_norm.csv");
  ASSERT_EQ(norm_rows.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(ReadCsv(csv / "Train_Samples_tokens_per_s.csv").second.size(),
            static_cast<size_t>(kSteps));
  for (int64_t step = 1; step <= kSteps; ++step) {
    const StepRecord& r = metrics.at(step);
    const size_t i = static_cast<size_t>(step - 1);
    EXPECT_EQ(loss_rows[i].first, step * batch);
    // The same double as metrics.jsonl's: both texts round-trip.
    EXPECT_EQ(loss_rows[i].second, r.loss) << "step " << step;
    EXPECT_EQ(lr_rows[i].first, step * batch);
    EXPECT_EQ(lr_rows[i].second, r.lr) << "step " << step;
    EXPECT_EQ(norm_rows[i].second, r.grad_norm) << "step " << step;
  }
  // f32: no loss scale, as DeepSpeed logs it for fp16 only.
  EXPECT_FALSE(fs::exists(csv / "Train_Samples_loss_scale.csv"));
  // Validation: before the first step, then every 3 steps.
  auto [val_header, val_rows] = ReadCsv(csv / "Train_Samples_val_loss.csv");
  EXPECT_EQ(val_header, "step,val_loss");
  ASSERT_EQ(val_rows.size(), 3u);
  EXPECT_EQ(val_rows[0], std::make_pair(int64_t{0}, initial_val_loss));
  EXPECT_EQ(val_rows[1], std::make_pair(3 * batch, *metrics.at(3).val_loss));
  EXPECT_EQ(val_rows[2], std::make_pair(6 * batch, *metrics.at(6).val_loss));

  int files = 0;
  const auto view = TensorBoardView(fs::path(monitor_dir) / "tb", &files);
  EXPECT_EQ(files, tensorboard_files);
  ASSERT_TRUE(view.contains("Train/Samples/train_loss"));
  const auto& losses = view.at("Train/Samples/train_loss");
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
  for (int64_t step = 1; step <= kSteps; ++step) {
    const auto [samples, value] = losses[static_cast<size_t>(step - 1)];
    EXPECT_EQ(samples, step * batch);
    EXPECT_EQ(std::bit_cast<uint32_t>(value),
              std::bit_cast<uint32_t>(static_cast<float>(metrics.at(step).loss)))
        << "step " << step;
  }
  EXPECT_EQ(view.at("Train/Samples/lr").size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(view.at("Train/Samples/grad_norm").size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(view.at("Train/Samples/val_loss").size(), 3u);
  EXPECT_EQ(view.at("Train/Samples/val_loss")[2],
            std::make_pair(6 * batch, static_cast<float>(*metrics.at(6).val_loss)));
  EXPECT_FALSE(view.contains("Train/Samples/loss_scale"));
}

TEST(MonitorRunTest, EveryStepOnceThroughAResume) {
  Comm& world = TestWorld();
  const int n = world.size();
  const std::string corpus =
      test_util::WriteFile(test_util::TempPath("corpus_rank" + std::to_string(world.rank())),
                           test_util::SyntheticCorpus(64 * 1024));
  const std::string run_dir = test_util::TempPath("run_np" + std::to_string(n));
  const std::string monitor_dir = test_util::TempPath("monitors_np" + std::to_string(n));
  if (world.rank() == 0) {
    fs::remove_all(run_dir);
    fs::remove_all(monitor_dir);
  }
  ASSERT_TRUE(world.Barrier().ok());
  const Config config = test_util::LoadTestConfig(
      test_util::TinyGptYaml(corpus, run_dir),
      {"run.steps=" + std::to_string(kSteps), "run.eval_interval=3", "checkpoint.save_interval=2",
       "tensorboard.enabled=true", "tensorboard.output_path=" + monitor_dir,
       "tensorboard.job_name=tb", "csv_monitor.enabled=true",
       "csv_monitor.output_path=" + monitor_dir, "csv_monitor.job_name=csv"});
  const int64_t batch = 4 * n;  // train_micro_batch_size_per_gpu 4, no accumulation

  TrainerOptions options;
  options.world = &world;
  options.progress = ProgressMode::kOff;
  options.summary_stream = nullptr;
  double initial_val_loss = 0.0;
  {
    Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
    ASSERT_EQ((*trainer)->config().batch.train_batch_size, batch);  // fitted to the world
    Result<TrainSummary> summary = (*trainer)->Run();
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    ASSERT_TRUE(summary->initial_val_loss.has_value());
    initial_val_loss = *summary->initial_val_loss;
  }
  if (world.rank() == 0) {
    CheckMonitors(run_dir, monitor_dir, batch, initial_val_loss, /*tensorboard_files=*/1);
  }
  ASSERT_TRUE(world.Barrier().ok());

  // Back to the checkpoint of step 4: steps 5 and 6 are trained (and logged) again.
  options.resume = (fs::path(run_dir) / "checkpoints" / "step_4").string();
  {
    Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
    Result<TrainSummary> summary = (*trainer)->Run();
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    EXPECT_EQ(summary->steps, 2);
  }
  if (world.rank() == 0) {
    CheckMonitors(run_dir, monitor_dir, batch, initial_val_loss, /*tensorboard_files=*/2);
  }
  ASSERT_TRUE(world.Barrier().ok());
}

}  // namespace
}  // namespace sluice::train
