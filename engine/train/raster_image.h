// An RGB canvas with the few drawing operations a line chart needs (loss_plot.h): rectangles,
// lines, dots and text in the built-in 5x7 font (bitmap_font.h), all clipped to the canvas.
// Coordinates are pixels, x to the right and y down from the top-left corner.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace sluice::train {

struct Rgb {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;
  bool operator==(const Rgb&) const = default;
};

class RasterImage {
 public:
  RasterImage(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  // Row-major, 3 bytes a pixel, no padding.
  const std::vector<uint8_t>& pixels() const { return pixels_; }
  Rgb At(int x, int y) const;

  void Set(int x, int y, Rgb color);  // outside the canvas: ignored
  // The pixels x0 <= x < x1, y0 <= y < y1.
  void FillRect(int x0, int y0, int x1, int y1, Rgb color);
  // From (x0, y0) to (x1, y1), both ends included, `thickness` pixels wide (a square pen).
  void Line(int x0, int y0, int x1, int y1, Rgb color, int thickness = 1);
  // A filled disc.
  void Dot(int cx, int cy, int radius, Rgb color);
  // `text` with its top-left corner at (x, y), each font pixel drawn as scale x scale. Vertical
  // text is turned a quarter anticlockwise (read from bottom to top) with (x, y) its bottom-left
  // corner.
  void Text(int x, int y, std::string_view text, Rgb color, int scale = 1, bool vertical = false);

  // The size `text` takes along its direction, and across it.
  static int TextLength(std::string_view text, int scale = 1);
  static int TextHeight(int scale = 1);

 private:
  int width_;
  int height_;
  std::vector<uint8_t> pixels_;
};

}  // namespace sluice::train
