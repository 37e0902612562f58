// A 5x7 bitmap font for the printable ASCII characters, for the labels of the loss plot
// (loss_plot.h) without a font library. Glyphs are the classic 5x7 LCD font: five columns per
// character, bit r of a column set when row r (0 at the top) is lit.
#pragma once

#include <array>
#include <cstdint>

namespace sluice::train {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 7;
inline constexpr int kGlyphAdvance = 6;  // one column of space between characters

// The columns of `c`; characters outside ' '..'~' get the glyph of '?'.
const std::array<uint8_t, kGlyphWidth>& Glyph(char c);

}  // namespace sluice::train
