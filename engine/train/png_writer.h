// PNG encoding of a RasterImage (raster_image.h): 8-bit RGB, no interlace, every row with filter
// type 0, the image data deflated by zlib in one IDAT chunk.
#pragma once

#include <string>

#include "engine/train/raster_image.h"
#include "runtime/status.h"

namespace sluice::train {

// The bytes of a PNG file showing `image`.
std::string EncodePng(const RasterImage& image);

// EncodePng, written to `path` atomically (a record: not fsync'ed). IoError naming the path.
Status WritePng(const RasterImage& image, const std::string& path);

}  // namespace sluice::train
