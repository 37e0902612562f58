// The metrics record, the progress display (plain and bar) and the summary table.
#include "engine/train/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "engine/train/step_metrics.h"
#include "engine/train/summary.h"

namespace sluice::train {
namespace {

std::string Capture(const std::function<void(std::FILE*)>& write) {
  char* data = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&data, &size);
  write(f);
  std::fclose(f);
  std::string text(data, size);
  std::free(data);
  return text;
}

StepMetrics Step(int64_t step, double loss) {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.lr = 1e-3;
  m.grad_norm = 0.5;
  m.tokens = 1000;
  m.total_tokens = step * 1000;
  m.step_time_s = 0.1;
  m.tokens_per_s = 10000;
  return m;
}

TEST(StepMetricsTest, JsonHasEveryFieldInOrder) {
  StepMetrics m = Step(3, 2.5);
  m.peak_bytes[0] = 4096;
  nlohmann::ordered_json j = StepMetricsToJson(m);
  const char* keys[] = {"step",        "loss",         "lr",          "grad_norm",
                        "loss_scale",  "skipped",      "tokens",      "total_tokens",
                        "step_time_s", "tokens_per_s", "tflops",      "mfu",
                        "forward_s",   "backward_s",   "optimizer_s", "peak_bytes"};
  auto it = j.begin();
  for (const char* key : keys) {
    ASSERT_NE(it, j.end());
    EXPECT_EQ(it.key(), key);
    ++it;
  }
  EXPECT_EQ(it, j.end());  // no val_loss on a step without evaluation
  EXPECT_EQ(j["peak_bytes"]["device"], 4096);
  EXPECT_TRUE(j["peak_bytes"].contains("nvme"));
  m.val_loss = 1.75;
  m.grad_norm = std::numeric_limits<double>::infinity();
  j = StepMetricsToJson(m);
  EXPECT_EQ(j["val_loss"], 1.75);
  EXPECT_TRUE(j["grad_norm"].is_null());  // JSON has no inf
}

TEST(ProgressTest, PlainLinesEveryLogIntervalAndOnEvaluation) {
  std::string text = Capture([](std::FILE* f) {
    ProgressReporter p(f, /*interactive=*/false, /*total_steps=*/10, /*log_interval=*/4);
    p.Start();
    for (int s = 1; s <= 10; ++s) {
      StepMetrics m = Step(s, 3.0 - 0.1 * s);
      if (s == 5) m.val_loss = 2.25;
      p.Update(m);
    }
    p.Finish();
  });
  EXPECT_NE(text.find("step 4/10"), std::string::npos) << text;
  EXPECT_NE(text.find("step 5/10"), std::string::npos) << text;  // the evaluation
  EXPECT_NE(text.find("val 2.2500"), std::string::npos) << text;
  EXPECT_NE(text.find("step 8/10"), std::string::npos) << text;
  EXPECT_NE(text.find("step 10/10"), std::string::npos) << text;  // the last step
  EXPECT_EQ(text.find("step 3/10"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no bar on a non-terminal";
  EXPECT_NE(text.find("ETA"), std::string::npos);
  EXPECT_NE(text.find("tok/s"), std::string::npos);
}

TEST(ProgressTest, BarRedrawsInPlace) {
  std::string text = Capture([](std::FILE* f) {
    ProgressReporter p(f, /*interactive=*/true, 3, 1);
    p.Start();
    for (int s = 1; s <= 3; ++s) p.Update(Step(s, 2.0));
    p.Finish();
  });
  EXPECT_NE(text.find("\r\x1b[Kstep 3/3 [########################] 100%"), std::string::npos)
      << text;
  EXPECT_NE(text.find("loss 2.0000"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

TEST(ProgressTest, DurationsAndCounts) {
  EXPECT_EQ(FormatDuration(0.25), "250ms");
  EXPECT_EQ(FormatDuration(4.25), "4.2s");
  EXPECT_EQ(FormatDuration(42), "42s");
  EXPECT_EQ(FormatDuration(187), "3m07s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatCount(950), "950");
  EXPECT_EQ(FormatCount(12345), "12.3k");
  EXPECT_EQ(FormatCount(4.56e6), "4.56M");
}

TEST(SummaryTest, TableAndJsonCarryTheSameFigures) {
  TrainSummary s;
  s.run_dir = "runs/x";
  s.model = "gpt2, 2 layers";
  s.parameters = 123456;
  s.precision = "bf16";
  s.steps = 10;
  s.tokens = 20480;
  s.wall_s = 4.0;
  s.train_s = 2.0;
  s.tokens_per_s = 10240;
  s.phases = {1.0, 0.5, 0.25, 0.2, 2.05};
  s.peak_bytes = {1 << 20, 0, 0, 0};
  s.final_train_loss = 1.5;
  s.final_train_loss_window = 10;
  s.initial_val_loss = 5.5;
  s.final_val_loss = 1.75;
  std::string table = FormatSummaryTable(s);
  for (const char* want : {"10.2k tokens/s", "forward 1.0s (25%)", "device 1.00 MiB",
                           "1.5000 (mean of the last 10 steps)", "5.5000 at step 0 -> 1.7500"}) {
    EXPECT_NE(table.find(want), std::string::npos) << want << "\n" << table;
  }
  nlohmann::ordered_json j = SummaryToJson(s);
  EXPECT_EQ(j["tokens_per_s"], 10240.0);
  EXPECT_EQ(j["phases_s"]["backward"], 0.5);
  EXPECT_EQ(j["peak_bytes"]["device"], 1 << 20);
  EXPECT_EQ(j["final_val_loss"], 1.75);
  EXPECT_EQ(j["final_train_loss"], 1.5);
}

}  // namespace
}  // namespace sluice::train
