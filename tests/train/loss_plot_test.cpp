// The loss plot sluice train draws: the PNG is decoded here independently (signature, chunk
// CRCs with a bitwise CRC-32, IHDR, zlib stream, scanline filters) and its pixels are checked
// where a known curve must have put them.
#include "engine/train/loss_plot.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/train/bitmap_font.h"
#include "engine/train/png_writer.h"
#include "engine/train/raster_image.h"

namespace sluice::train {
namespace {

uint32_t Crc32(const uint8_t* data, size_t size) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t ReadU32(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + at);
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

struct DecodedPng {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes a pixel
  Rgb At(int x, int y) const {
    const size_t at = (static_cast<size_t>(y) * width + x) * 3;
    return {rgb[at], rgb[at + 1], rgb[at + 2]};
  }
};

// A PNG decoder for 8-bit RGB, non-interlaced files, with every check failing the test.
DecodedPng DecodePng(const std::string& file) {
  DecodedPng png;
  EXPECT_EQ(file.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t at = 8;
  std::string idat;
  std::vector<std::string> types;
  while (at + 12 <= file.size()) {
    const uint32_t length = ReadU32(file, at);
    const std::string type = file.substr(at + 4, 4);
    EXPECT_LE(at + 12 + length, file.size()) << type;
    const auto* typed = reinterpret_cast<const uint8_t*>(file.data() + at + 4);
    EXPECT_EQ(ReadU32(file, at + 8 + length), Crc32(typed, 4 + length)) << "CRC of " << type;
    const std::string data = file.substr(at + 8, length);
    types.push_back(type);
    if (type == "IHDR") {
      EXPECT_EQ(length, 13u);
      png.width = static_cast<int>(ReadU32(data, 0));
      png.height = static_cast<int>(ReadU32(data, 4));
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5))
          << "8-bit RGB, deflate, filter method 0, no interlace";
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + length;
  }
  EXPECT_EQ(at, file.size()) << "bytes after the last chunk";
  EXPECT_FALSE(types.empty());
  EXPECT_EQ(types.front(), "IHDR");
  EXPECT_EQ(types.back(), "IEND");
  const size_t stride = static_cast<size_t>(png.width) * 3;
  std::vector<uint8_t> raw((stride + 1) * png.height);
  uLongf raw_size = raw.size();
  EXPECT_EQ(
      uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
      Z_OK);
  EXPECT_EQ(raw_size, raw.size());
  png.rgb.resize(stride * png.height);
  for (int y = 0; y < png.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &png.rgb[y * stride];
    const uint8_t* up = y > 0 ? &png.rgb[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= 3 ? out[i - 3] : 0;
      const int b = up != nullptr ? up[i] : 0;
      const int c = (i >= 3 && up != nullptr) ? up[i - 3] : 0;
      int predictor = 0;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = (pa <= pb && pa <= pc) ? a : pb <= pc ? b : c;
          break;
        }
        default:
          ADD_FAILURE() << "filter type " << int{filter};
          return png;
      }
      out[i] = static_cast<uint8_t>(in[i] + predictor);
    }
  }
  return png;
}

TEST(PngWriterTest, DecodesToTheSamePixels) {
  RasterImage image(7, 5, Rgb{10, 20, 30});
  image.Set(0, 0, Rgb{255, 0, 0});
  image.Set(6, 4, Rgb{0, 255, 0});
  image.FillRect(2, 1, 4, 3, Rgb{1, 2, 3});
  const DecodedPng png = DecodePng(EncodePng(image));
  ASSERT_EQ(png.width, 7);
  ASSERT_EQ(png.height, 5);
  EXPECT_EQ(png.rgb, image.pixels());
  EXPECT_EQ(png.At(0, 0), (Rgb{255, 0, 0}));
  EXPECT_EQ(png.At(3, 2), (Rgb{1, 2, 3}));
  EXPECT_EQ(png.At(4, 2), (Rgb{10, 20, 30}));
}

TEST(RasterImageTest, LinesTextAndClipping) {
  RasterImage image(40, 20, Rgb{255, 255, 255});
  image.Line(0, 0, 39, 19, Rgb{0, 0, 0});
  EXPECT_EQ(image.At(0, 0), (Rgb{0, 0, 0}));
  EXPECT_EQ(image.At(39, 19), (Rgb{0, 0, 0}));
  EXPECT_EQ(image.At(39, 0), (Rgb{255, 255, 255}));
  image.Line(-100, 5, 100, 5, Rgb{1, 1, 1}, 3);  // clipped, three rows thick
  EXPECT_EQ(image.At(20, 4), (Rgb{1, 1, 1}));
  EXPECT_EQ(image.At(20, 6), (Rgb{1, 1, 1}));
  EXPECT_EQ(image.At(20, 7), (Rgb{255, 255, 255}));

  // '1' of the font: its middle column (bit rows 0-6) lit, drawn at scale 2 from (2, 2).
  RasterImage text(20, 20, Rgb{255, 255, 255});
  text.Text(2, 2, "1", Rgb{0, 0, 0}, 2);
  const auto& one = Glyph('1');
  for (int col = 0; col < kGlyphWidth; ++col) {
    for (int row = 0; row < kGlyphHeight; ++row) {
      const bool lit = (one[col] >> row & 1) != 0;
      EXPECT_EQ(text.At(2 + 2 * col + 1, 2 + 2 * row + 1) == (Rgb{0, 0, 0}), lit)
          << "column " << col << " row " << row;
    }
  }
  EXPECT_EQ(RasterImage::TextLength("ab", 2), 22);
}

LossCurve KnownCurve() {
  LossCurve curve;
  for (int step = 1; step <= 200; ++step) {
    curve.train.push_back({step, 5.0 - 3.0 * (step - 1) / 199.0});  // 5 down to 2
  }
  for (int step : {50, 100, 150, 200}) curve.validation.push_back({step, 4.5 - step / 100.0});
  return curve;
}

TEST(LossPlotTest, KnownCurveIsWhereItShouldBe) {
  PlotFrame frame;
  const RasterImage image = RenderLossPlot(KnownCurve(), "runs/test: a known curve", &frame);
  const DecodedPng png = DecodePng(EncodePng(image));
  ASSERT_EQ(png.width, kLossPlotWidth);
  ASSERT_EQ(png.height, kLossPlotHeight);
  // The axes cover the data with whole ticks.
  EXPECT_LE(frame.x_min, 1);
  EXPECT_GE(frame.x_max, 200);
  EXPECT_LE(frame.y_min, 2.0);
  EXPECT_GE(frame.y_max, 5.0);
  EXPECT_GT(frame.right - frame.left, 600);

  // The train line passes through its points (away from the legend box in the top right).
  for (int step : {1, 40, 80, 130, 199}) {  // not under a validation dot
    const double loss = 5.0 - 3.0 * (step - 1) / 199.0;
    const int x = frame.PixelX(step);
    const int y = frame.PixelY(loss);
    bool found = false;
    for (int dy = -1; dy <= 1; ++dy) found |= png.At(x, y + dy) == kTrainColor;
    EXPECT_TRUE(found) << "train curve at step " << step << " (" << x << ", " << y << ")";
  }
  // A validation dot at each evaluation; the upper right of the plot area is empty of curves.
  for (const LossPoint& p : KnownCurve().validation) {
    EXPECT_EQ(png.At(frame.PixelX(p.step), frame.PixelY(p.loss)), kValidationColor) << p.step;
  }
  int curve_pixels_far_from_data = 0;
  for (int y = frame.PixelY(4.9); y < frame.PixelY(4.6); ++y) {
    for (int x = frame.PixelX(120); x < frame.PixelX(130); ++x) {
      if (png.At(x, y) == kTrainColor || png.At(x, y) == kValidationColor) {
        ++curve_pixels_far_from_data;
      }
    }
  }
  EXPECT_EQ(curve_pixels_far_from_data, 0);
  // The curve falls: in each column, the train pixels sit lower (larger y) on the left.
  int last_y = -1;
  for (int step : {70, 90, 120, 140, 170, 190}) {  // away from the validation dots
    const int x = frame.PixelX(step);
    int top = -1;
    // From below the legend (top right) down.
    for (int y = frame.PixelY(4.2); y <= frame.bottom && top < 0; ++y) {
      if (png.At(x, y) == kTrainColor) top = y;
    }
    ASSERT_GE(top, 0) << "no train pixel in the column of step " << step;
    EXPECT_GT(top, last_y) << step;
    last_y = top;
  }
  // Text was drawn: black pixels left of the plot area (tick labels, the axis label).
  int ink = 0;
  for (int y = frame.top; y < frame.bottom; ++y) {
    for (int x = 0; x < frame.left - 8; ++x) ink += png.At(x, y) == (Rgb{0, 0, 0});
  }
  EXPECT_GT(ink, 100);
}

TEST(LossPlotTest, ReadsMetricsLinesAndWritesThePng) {
  const std::string dir = ::testing::TempDir() + "sluice_loss_plot_test";
  std::filesystem::create_directories(dir);
  const std::string metrics = dir + "/metrics.jsonl";
  std::ofstream(metrics) << "{\"step\":1,\"loss\":5.5,\"lr\":0.001}\n"
                            "not json at all\n"
                            "{\"step\":2,\"loss\":null}\n"
                            "{\"step\":3,\"loss\":4.0,\"val_loss\":4.25}\n"
                            "{\"step\":4,\"loss\":3.0";  // torn last line
  Result<LossCurve> curve = ReadLossCurve(metrics);
  ASSERT_TRUE(curve.ok()) << curve.status().ToString();
  ASSERT_EQ(curve->train.size(), 2u);
  EXPECT_EQ(curve->train[1].step, 3);
  EXPECT_EQ(curve->train[1].loss, 4.0);
  ASSERT_EQ(curve->validation.size(), 1u);
  EXPECT_EQ(curve->validation[0].loss, 4.25);

  const std::string png_path = dir + "/loss.png";
  ASSERT_TRUE(WriteLossPlot(metrics, png_path, "t", LossPoint{0, 5.6}).ok());
  std::ifstream in(png_path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const DecodedPng png = DecodePng(bytes.str());
  EXPECT_EQ(png.width, kLossPlotWidth);
  EXPECT_EQ(png.height, kLossPlotHeight);

  Result<LossCurve> missing = ReadLossCurve(dir + "/no_such.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such.jsonl"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::train
