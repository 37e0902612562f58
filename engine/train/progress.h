// Training progress for people. On a terminal: one status line redrawn in place (at most ten
// times a second) with a bar, steps done, token rate, time per step, ETA and the latest losses;
// evaluation results are printed above it as they come. Otherwise (a log file, a pipe, CI):
// one plain line every log_interval steps, on the last step and on every evaluation.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/train/step_metrics.h"

namespace sluice::train {

// "250ms", "4.2s", "42s", "3m07s", "1h02m".
std::string FormatDuration(double seconds);
// "950", "12.3k", "4.56M".
std::string FormatCount(double value);

class ProgressReporter {
 public:
  // `interactive`: draw the bar (the stream is a terminal). `log_interval` >= 1.
  ProgressReporter(std::FILE* out, bool interactive, int64_t total_steps, int64_t log_interval);

  // Whether `out` is a terminal.
  static bool IsTerminal(std::FILE* out);

  // Before step 1: the clock the rate and ETA are measured from starts here.
  void Start();
  // After each step (its metrics, val_loss set when it evaluated).
  void Update(const StepMetrics& metrics);
  // After the last step: ends the bar's line.
  void Finish();

 private:
  std::string StatusLine(const StepMetrics& metrics, double elapsed) const;
  void PrintPlain(const StepMetrics& metrics, double elapsed);
  void DrawBar(const StepMetrics& metrics, double elapsed);

  std::FILE* out_;
  bool interactive_;
  int64_t total_steps_;
  int64_t log_interval_;
  double start_s_ = 0.0;
  double last_draw_s_ = -1.0;
  bool bar_visible_ = false;
  double last_val_loss_ = -1.0;
  int64_t tokens_ = 0;
  double step_seconds_ = 0.0;  // training time without evaluation, for the rate
  int64_t skipped_ = 0;
};

}  // namespace sluice::train
