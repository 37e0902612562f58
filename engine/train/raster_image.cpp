#include "engine/train/raster_image.h"

#include <algorithm>
#include <cstdlib>

#include "engine/train/bitmap_font.h"
#include "runtime/check.h"

namespace sluice::train {

RasterImage::RasterImage(int width, int height, Rgb background) : width_(width), height_(height) {
  SLUICE_CHECK(width > 0 && height > 0) << width << "x" << height;
  pixels_.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  FillRect(0, 0, width, height, background);
}

Rgb RasterImage::At(int x, int y) const {
  SLUICE_CHECK(x >= 0 && x < width_ && y >= 0 && y < height_) << x << "," << y;
  const size_t at = (static_cast<size_t>(y) * static_cast<size_t>(width_) + x) * 3;
  return {pixels_[at], pixels_[at + 1], pixels_[at + 2]};
}

void RasterImage::Set(int x, int y, Rgb color) {
  if (x < 0 || x >= width_ || y < 0 || y >= height_) return;
  const size_t at = (static_cast<size_t>(y) * static_cast<size_t>(width_) + x) * 3;
  pixels_[at] = color.r;
  pixels_[at + 1] = color.g;
  pixels_[at + 2] = color.b;
}

void RasterImage::FillRect(int x0, int y0, int x1, int y1, Rgb color) {
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, width_);
  y1 = std::min(y1, height_);
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) Set(x, y, color);
  }
}

void RasterImage::Line(int x0, int y0, int x1, int y1, Rgb color, int thickness) {
  // Bresenham over the whole octant range; the pen is a square of `thickness` pixels centred on
  // each point (offset to the top-left for even sizes).
  const int lo = -(thickness - 1) / 2;
  const int hi = thickness / 2;
  const int dx = std::abs(x1 - x0);
  const int dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1;
  const int sy = y0 < y1 ? 1 : -1;
  int error = dx + dy;
  while (true) {
    FillRect(x0 + lo, y0 + lo, x0 + hi + 1, y0 + hi + 1, color);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * error;
    if (e2 >= dy) {
      error += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      error += dx;
      y0 += sy;
    }
  }
}

void RasterImage::Dot(int cx, int cy, int radius, Rgb color) {
  for (int y = -radius; y <= radius; ++y) {
    for (int x = -radius; x <= radius; ++x) {
      if (x * x + y * y <= radius * radius + radius) Set(cx + x, cy + y, color);
    }
  }
}

void RasterImage::Text(int x, int y, std::string_view text, Rgb color, int scale, bool vertical) {
  int pen = 0;  // along the text
  for (char c : text) {
    const auto& columns = Glyph(c);
    for (int col = 0; col < kGlyphWidth; ++col) {
      for (int row = 0; row < kGlyphHeight; ++row) {
        if ((columns[col] >> row & 1) == 0) continue;
        const int along = pen + col * scale;
        const int across = row * scale;
        if (vertical) {
          // Turned anticlockwise: the text runs up from (x, y), its top faces left.
          FillRect(x + across, y - along - scale, x + across + scale, y - along, color);
        } else {
          FillRect(x + along, y + across, x + along + scale, y + across + scale, color);
        }
      }
    }
    pen += kGlyphAdvance * scale;
  }
}

int RasterImage::TextLength(std::string_view text, int scale) {
  if (text.empty()) return 0;
  return (static_cast<int>(text.size()) * kGlyphAdvance - (kGlyphAdvance - kGlyphWidth)) * scale;
}

int RasterImage::TextHeight(int scale) { return kGlyphHeight * scale; }

}  // namespace sluice::train
