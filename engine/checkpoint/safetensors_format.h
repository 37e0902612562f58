// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON ({"__metadata__": {str: str}, name: {"dtype", "shape",
// "data_offsets": [begin, end]}}, padded with spaces), then the data; offsets are relative to the
// end of the header and the tensors tile the data exactly, without holes or overlaps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

enum class SafetensorsDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};
std::string_view SafetensorsDTypeName(SafetensorsDType dtype);  // "F32", "BF16", ...
Result<SafetensorsDType> ParseSafetensorsDType(std::string_view name);
size_t SafetensorsDTypeSize(SafetensorsDType dtype);
SafetensorsDType ToSafetensorsDType(DType dtype);
// The Sluice dtype of a floating safetensors dtype Sluice computes with (F32, BF16, F16).
std::optional<DType> ToSluiceDType(SafetensorsDType dtype);

// The reference implementation's limit on the JSON header.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the start of the data section
  uint64_t end = 0;

  int64_t numel() const;
  std::string ShapeString() const;  // "[768, 2304]"
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // 8 + N
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsTensor> tensors;  // ascending data offsets
};

// Parses and validates the JSON header of a file of `file_size` bytes: JSON object, dtypes,
// shapes, offsets that match dtype and shape, tile the data without holes or overlaps and end at
// the end of the file. Errors name `path`, the tensor and the field.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                 const std::filesystem::path& path);

// The header a writer emits for `tensors` (in that order, offsets assigned contiguously): the
// 8-byte length followed by the JSON, padded with spaces to a multiple of 8 bytes.
std::string EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata);

}  // namespace sluice::checkpoint
