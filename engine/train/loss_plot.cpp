#include "engine/train/loss_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "engine/train/png_writer.h"
#include "runtime/logging.h"

namespace sluice::train {
namespace {

constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kInk{0, 0, 0};
constexpr Rgb kGrid{225, 225, 225};
constexpr int kScale = 2;  // font pixels are 2x2 image pixels: 10x14 characters
constexpr int kTickLength = 6;

// A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `span`.
double NiceStep(double span, int target) {
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / power;
  const double nice = fraction < 1.5 ? 1.0 : fraction < 3.5 ? 2.0 : fraction < 7.5 ? 5.0 : 10.0;
  return nice * power;
}

struct Axis {
  double min = 0.0;
  double max = 1.0;
  double step = 1.0;
};

// Ticks at multiples of a nice step, the range widened to whole steps around [lo, hi].
Axis NiceAxis(double lo, double hi, int target, bool integer) {
  if (!(hi > lo)) {
    const double pad = integer ? 1.0 : std::max(0.5, std::abs(lo) * 0.1);
    lo -= pad;
    hi += pad;
  }
  Axis axis;
  axis.step = NiceStep(hi - lo, target);
  if (integer) axis.step = std::max(1.0, axis.step);
  axis.min = std::floor(lo / axis.step) * axis.step;
  axis.max = std::ceil(hi / axis.step) * axis.step;
  return axis;
}

std::string TickLabel(double value, double step) {
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  std::string text = fmt::format("{:.{}f}", value, decimals);
  return text == "-0" ? "0" : text;
}

std::string Printable(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  }
  return out;
}

void DrawPolyline(RasterImage& image, const PlotFrame& frame, const std::vector<LossPoint>& points,
                  Rgb color, int thickness) {
  for (size_t i = 1; i < points.size(); ++i) {
    image.Line(frame.PixelX(static_cast<double>(points[i - 1].step)),
               frame.PixelY(points[i - 1].loss), frame.PixelX(static_cast<double>(points[i].step)),
               frame.PixelY(points[i].loss), color, thickness);
  }
  if (points.size() == 1) {
    image.Dot(frame.PixelX(static_cast<double>(points[0].step)), frame.PixelY(points[0].loss), 2,
              color);
  }
}

}  // namespace

int PlotFrame::PixelX(double step) const {
  return left + static_cast<int>(std::lround((step - x_min) / (x_max - x_min) * (right - left)));
}

int PlotFrame::PixelY(double loss) const {
  return bottom - static_cast<int>(std::lround((loss - y_min) / (y_max - y_min) * (bottom - top)));
}

Result<LossCurve> ReadLossCurve(const std::string& metrics_path) {
  std::error_code error;
  if (!std::filesystem::exists(metrics_path, error)) {
    return NotFoundError("{} does not exist: no loss curve to plot", metrics_path);
  }
  std::ifstream in(metrics_path);
  if (!in) return IoError("cannot open {} to plot the loss curve", metrics_path);
  LossCurve curve;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) {
      continue;
    }
    const int64_t step = record["step"].get<int64_t>();
    auto finite = [&record](const char* key) {
      return record.contains(key) && record[key].is_number() &&
             std::isfinite(record[key].get<double>());
    };
    if (finite("loss")) curve.train.push_back({step, record["loss"].get<double>()});
    if (finite("val_loss")) curve.validation.push_back({step, record["val_loss"].get<double>()});
  }
  if (in.bad()) return IoError("reading {} failed while plotting the loss curve", metrics_path);
  return curve;
}

RasterImage RenderLossPlot(const LossCurve& curve, const std::string& title, PlotFrame* frame_out) {
  RasterImage image(kLossPlotWidth, kLossPlotHeight, kBackground);
  double x_lo = 0.0, x_hi = 1.0, y_lo = 0.0, y_hi = 1.0;
  bool any = false;
  for (const auto* points : {&curve.train, &curve.validation}) {
    for (const LossPoint& p : *points) {
      const double x = static_cast<double>(p.step);
      x_lo = any ? std::min(x_lo, x) : x;
      x_hi = any ? std::max(x_hi, x) : x;
      y_lo = any ? std::min(y_lo, p.loss) : p.loss;
      y_hi = any ? std::max(y_hi, p.loss) : p.loss;
      any = true;
    }
  }
  // Steps from 0 (where the validation before training sits) unless the curve starts late.
  if (any && x_lo > 0 && x_lo <= 0.2 * x_hi) x_lo = 0;
  const Axis x_axis = NiceAxis(x_lo, x_hi, 8, /*integer=*/true);
  const Axis y_axis = NiceAxis(y_lo, y_hi, 6, /*integer=*/false);

  PlotFrame frame;
  frame.left = 100;
  frame.top = 50;
  frame.right = kLossPlotWidth - 30;
  frame.bottom = kLossPlotHeight - 70;
  frame.x_min = x_axis.min;
  frame.x_max = x_axis.max;
  frame.y_min = y_axis.min;
  frame.y_max = y_axis.max;
  const int text_h = RasterImage::TextHeight(kScale);

  // Grid and tick labels first, then the frame, the curves over both (a point at the end of an
  // axis stays visible).
  for (double y = y_axis.min; y <= y_axis.max + 0.5 * y_axis.step; y += y_axis.step) {
    const int py = frame.PixelY(y);
    image.Line(frame.left, py, frame.right, py, kGrid);
    image.Line(frame.left - kTickLength, py, frame.left, py, kInk);
    const std::string label = TickLabel(y, y_axis.step);
    image.Text(frame.left - kTickLength - 6 - RasterImage::TextLength(label, kScale),
               py - text_h / 2, label, kInk, kScale);
  }
  for (double x = x_axis.min; x <= x_axis.max + 0.5 * x_axis.step; x += x_axis.step) {
    const int px = frame.PixelX(x);
    image.Line(px, frame.top, px, frame.bottom, kGrid);
    image.Line(px, frame.bottom, px, frame.bottom + kTickLength, kInk);
    const std::string label = TickLabel(x, x_axis.step);
    image.Text(px - RasterImage::TextLength(label, kScale) / 2, frame.bottom + kTickLength + 6,
               label, kInk, kScale);
  }

  image.Line(frame.left, frame.top, frame.right, frame.top, kInk);
  image.Line(frame.left, frame.bottom, frame.right, frame.bottom, kInk);
  image.Line(frame.left, frame.top, frame.left, frame.bottom, kInk);
  image.Line(frame.right, frame.top, frame.right, frame.bottom, kInk);

  DrawPolyline(image, frame, curve.train, kTrainColor, 1);
  DrawPolyline(image, frame, curve.validation, kValidationColor, 2);
  for (const LossPoint& p : curve.validation) {
    image.Dot(frame.PixelX(static_cast<double>(p.step)), frame.PixelY(p.loss), 4, kValidationColor);
  }

  // Legend in the top-right corner of the plot area, over a white box.
  const int legend_w = 40 + RasterImage::TextLength("validation", kScale) + 20;
  const int lx = frame.right - legend_w - 10;
  const int ly = frame.top + 10;
  image.FillRect(lx, ly, lx + legend_w, ly + 2 * text_h + 30, kBackground);
  image.Line(lx, ly, lx + legend_w, ly, kInk);
  image.Line(lx, ly + 2 * text_h + 30, lx + legend_w, ly + 2 * text_h + 30, kInk);
  image.Line(lx, ly, lx, ly + 2 * text_h + 30, kInk);
  image.Line(lx + legend_w, ly, lx + legend_w, ly + 2 * text_h + 30, kInk);
  const int row1 = ly + 10 + text_h / 2;
  const int row2 = row1 + text_h + 10;
  image.Line(lx + 8, row1, lx + 32, row1, kTrainColor, 2);
  image.Text(lx + 40, row1 - text_h / 2, "train", kInk, kScale);
  image.Line(lx + 8, row2, lx + 32, row2, kValidationColor, 2);
  image.Dot(lx + 20, row2, 4, kValidationColor);
  image.Text(lx + 40, row2 - text_h / 2, "validation", kInk, kScale);

  // A title wider than the image loses its end.
  std::string printable_title = Printable(title);
  const int max_title = kLossPlotWidth - 20;
  if (RasterImage::TextLength(printable_title, kScale) > max_title) {
    while (!printable_title.empty() &&
           RasterImage::TextLength(printable_title + "...", kScale) > max_title) {
      printable_title.pop_back();
    }
    printable_title += "...";
  }
  image.Text((kLossPlotWidth - RasterImage::TextLength(printable_title, kScale)) / 2, 16,
             printable_title, kInk, kScale);
  const std::string x_label = "optimizer step";
  image.Text((frame.left + frame.right - RasterImage::TextLength(x_label, kScale)) / 2,
             kLossPlotHeight - 10 - text_h, x_label, kInk, kScale);
  const std::string y_label = "loss (nats per token)";
  image.Text(14, (frame.top + frame.bottom + RasterImage::TextLength(y_label, kScale)) / 2, y_label,
             kInk, kScale, /*vertical=*/true);
  if (frame_out != nullptr) *frame_out = frame;
  return image;
}

Status WriteLossPlot(const std::string& metrics_path, const std::string& png_path,
                     const std::string& title, std::optional<LossPoint> validation_before) {
  SLUICE_ASSIGN_OR_RETURN(LossCurve curve, ReadLossCurve(metrics_path));
  if (validation_before.has_value() && std::isfinite(validation_before->loss)) {
    auto at = std::find_if(curve.validation.begin(), curve.validation.end(),
                           [&](const LossPoint& p) { return p.step >= validation_before->step; });
    curve.validation.insert(at, *validation_before);
  }
  if (curve.train.empty() && curve.validation.empty()) {
    SLUICE_LOG(kInfo, "train", "no losses in {}: no loss plot written", metrics_path);
    return OkStatus();
  }
  Status written = WritePng(RenderLossPlot(curve, title), png_path);
  if (!written.ok()) return std::move(written).WithContext("writing the loss plot");
  SLUICE_LOG(kInfo, "train", "loss curve drawn in {}", png_path);
  return OkStatus();
}

}  // namespace sluice::train
