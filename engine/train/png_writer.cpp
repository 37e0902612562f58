#include "engine/train/png_writer.h"

#include <zlib.h>

#include <cstdint>
#include <string_view>

#include "runtime/check.h"
#include "runtime/durable_file.h"

namespace sluice::train {
namespace {

void AppendU32(std::string& out, uint32_t value) {
  out.push_back(static_cast<char>(value >> 24));
  out.push_back(static_cast<char>(value >> 16));
  out.push_back(static_cast<char>(value >> 8));
  out.push_back(static_cast<char>(value));
}

// Length, type, data, and the CRC-32 of type and data.
void AppendChunk(std::string& out, std::string_view type, std::string_view data) {
  AppendU32(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out += type;
  out += data;
  const auto* crc_input = reinterpret_cast<const Bytef*>(out.data() + type_at);
  AppendU32(out, static_cast<uint32_t>(
                     crc32(0L, crc_input, static_cast<uInt>(type.size() + data.size()))));
}

}  // namespace

std::string EncodePng(const RasterImage& image) {
  const uint32_t width = static_cast<uint32_t>(image.width());
  const uint32_t height = static_cast<uint32_t>(image.height());
  const size_t row_bytes = static_cast<size_t>(width) * 3;

  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string header;
  AppendU32(header, width);
  AppendU32(header, height);
  header += std::string_view("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, filter 0, none
  AppendChunk(out, "IHDR", header);

  // Each scanline: its filter type (0, none), then the pixels.
  std::string raw;
  raw.reserve((row_bytes + 1) * height);
  const auto* pixels = reinterpret_cast<const char*>(image.pixels().data());
  for (uint32_t y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(pixels + y * row_bytes, row_bytes);
  }
  uLongf deflated_size = compressBound(static_cast<uLong>(raw.size()));
  std::string deflated(deflated_size, '\0');
  const int z = compress2(reinterpret_cast<Bytef*>(deflated.data()), &deflated_size,
                          reinterpret_cast<const Bytef*>(raw.data()),
                          static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION);
  // compressBound sizes the output for any input, and the level is valid: only memory can fail.
  SLUICE_CHECK(z == Z_OK) << "zlib compress2 returned " << z;
  deflated.resize(deflated_size);
  AppendChunk(out, "IDAT", deflated);
  AppendChunk(out, "IEND", "");
  return out;
}

Status WritePng(const RasterImage& image, const std::string& path) {
  return WriteFileAtomically(path, EncodePng(image), Durability::kUnsynced);
}

}  // namespace sluice::train
