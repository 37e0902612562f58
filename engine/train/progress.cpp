#include "engine/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace sluice::train {
namespace {

constexpr int kBarWidth = 24;
constexpr double kRedrawInterval = 0.1;

double NowSeconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 1) return fmt::format("{:.0f}ms", seconds * 1e3);
  if (seconds < 10) return fmt::format("{:.1f}s", seconds);
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string FormatCount(double value) {
  if (!std::isfinite(value)) return "?";
  if (value < 1e3) return fmt::format("{:.0f}", value);
  if (value < 1e6) return fmt::format("{:.1f}k", value / 1e3);
  if (value < 1e9) return fmt::format("{:.2f}M", value / 1e6);
  return fmt::format("{:.2f}G", value / 1e9);
}

ProgressReporter::ProgressReporter(std::FILE* out, bool interactive, int64_t total_steps,
                                   int64_t log_interval)
    : out_(out),
      interactive_(interactive),
      total_steps_(std::max<int64_t>(1, total_steps)),
      log_interval_(std::max<int64_t>(1, log_interval)) {}

bool ProgressReporter::IsTerminal(std::FILE* out) { return ::isatty(::fileno(out)) == 1; }

void ProgressReporter::Start() { start_s_ = NowSeconds(); }

std::string ProgressReporter::StatusLine(const StepMetrics& m, double elapsed) const {
  const double rate = step_seconds_ > 0 ? static_cast<double>(tokens_) / step_seconds_ : 0.0;
  const double per_step = elapsed / static_cast<double>(m.step);
  const double eta = per_step * static_cast<double>(total_steps_ - m.step);
  std::string line = fmt::format("{} tok/s | {}/step | ETA {} | loss {:.4f}", FormatCount(rate),
                                 FormatDuration(per_step), FormatDuration(eta), m.loss);
  if (last_val_loss_ >= 0) line += fmt::format(" | val {:.4f}", last_val_loss_);
  if (skipped_ > 0) line += fmt::format(" | skipped {}", skipped_);
  return line;
}

void ProgressReporter::PrintPlain(const StepMetrics& m, double elapsed) {
  const int percent = static_cast<int>(100 * m.step / total_steps_);
  std::string line = fmt::format("step {}/{} ({}%) lr {:.3e} grad_norm {:.3f} | {}", m.step,
                                 total_steps_, percent, m.lr, m.grad_norm, StatusLine(m, elapsed));
  if (m.skipped) line += fmt::format(" | overflow: step skipped (loss scale {})", m.loss_scale);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ProgressReporter::DrawBar(const StepMetrics& m, double elapsed) {
  const int filled = static_cast<int>(kBarWidth * m.step / total_steps_);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBarWidth - filled), '.');
  const int percent = static_cast<int>(100 * m.step / total_steps_);
  // \r returns to the line start, \x1b[K clears what a longer previous line left behind.
  std::fprintf(out_, "\r\x1b[Kstep %lld/%lld [%s] %3d%% | %s", static_cast<long long>(m.step),
               static_cast<long long>(total_steps_), bar.c_str(), percent,
               StatusLine(m, elapsed).c_str());
  std::fflush(out_);
  bar_visible_ = true;
}

void ProgressReporter::Update(const StepMetrics& m) {
  const double now = NowSeconds();
  const double elapsed = now - start_s_;
  tokens_ += m.tokens;
  step_seconds_ += m.step_time_s;
  if (m.skipped) ++skipped_;
  if (m.val_loss.has_value()) last_val_loss_ = *m.val_loss;
  const bool last = m.step >= total_steps_;
  if (!interactive_) {
    if (m.step % log_interval_ == 0 || last || m.val_loss.has_value() || m.skipped) {
      PrintPlain(m, elapsed);
    }
    return;
  }
  if (m.val_loss.has_value() || m.skipped) {
    // Above the bar, so the evaluation history stays on screen.
    std::fprintf(out_, "\r\x1b[K");
    std::string line = m.val_loss.has_value()
                           ? fmt::format("step {}: val_loss {:.4f} (train loss {:.4f})", m.step,
                                         *m.val_loss, m.loss)
                           : fmt::format("step {}: gradient overflow, step skipped (loss scale {})",
                                         m.step, m.loss_scale);
    std::fprintf(out_, "%s\n", line.c_str());
    bar_visible_ = false;
  }
  if (last || !bar_visible_ || now - last_draw_s_ >= kRedrawInterval) {
    DrawBar(m, elapsed);
    last_draw_s_ = now;
  }
}

void ProgressReporter::Finish() {
  if (interactive_ && bar_visible_) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
    bar_visible_ = false;
  }
}

}  // namespace sluice::train
