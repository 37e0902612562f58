// The loss curve of a run as a PNG (run.dir/loss.png), drawn by Sluice itself: the training loss
// of every step as a line, the validation losses as dots joined by a line, with axes, ticks,
// grid, a legend and labels in the built-in font (raster_image.h, png_writer.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/train/raster_image.h"
#include "runtime/status.h"

namespace sluice::train {

struct LossPoint {
  int64_t step = 0;
  double loss = 0.0;
};

struct LossCurve {
  std::vector<LossPoint> train;       // finite losses only (a skipped step's loss is still drawn)
  std::vector<LossPoint> validation;  // the steps with a val_loss
};

// The curve in metrics.jsonl lines (step_metrics.h): "step" with "loss" and, where present,
// "val_loss". Lines that do not parse, and null (non-finite) losses, are left out. NotFound or
// IoError naming the file when it cannot be read.
Result<LossCurve> ReadLossCurve(const std::string& metrics_path);

// Where the plot put its axes, so that values can be found again in the pixels.
struct PlotFrame {
  int left = 0, top = 0, right = 0, bottom = 0;  // the plot area, edges included
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  int PixelX(double step) const;
  int PixelY(double loss) const;
};

inline constexpr Rgb kTrainColor{31, 119, 180};
inline constexpr Rgb kValidationColor{230, 97, 1};

inline constexpr int kLossPlotWidth = 960;
inline constexpr int kLossPlotHeight = 540;

// The chart of `curve` under `title` (ASCII, other bytes show as '?'; cut with "..." where it
// would be wider than the image). A curve without points
// gives the empty axes. `frame` (optional) receives the axes' placement.
RasterImage RenderLossPlot(const LossCurve& curve, const std::string& title,
                           PlotFrame* frame = nullptr);

// ReadLossCurve(metrics_path) plus `validation_before` (the evaluation before the first step,
// which has no metrics line), rendered, written to png_path atomically. A metrics file without
// any loss writes nothing (there is no curve) and says so in the log.
Status WriteLossPlot(const std::string& metrics_path, const std::string& png_path,
                     const std::string& title,
                     std::optional<LossPoint> validation_before = std::nullopt);

}  // namespace sluice::train
