#include "engine/checkpoint/safetensors_format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace sluice::checkpoint {
namespace {

struct DTypeInfo {
  SafetensorsDType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::kBool, "BOOL", 1},      {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},          {SafetensorsDType::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},        {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},      {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},        {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kF64, "F64", 8},        {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
};

const DTypeInfo& Info(SafetensorsDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  SLUICE_CHECK(false) << "unknown safetensors dtype " << static_cast<int>(dtype);
  return kDTypes[0];
}

}  // namespace

std::string_view SafetensorsDTypeName(SafetensorsDType dtype) { return Info(dtype).name; }
size_t SafetensorsDTypeSize(SafetensorsDType dtype) { return Info(dtype).size; }

Result<SafetensorsDType> ParseSafetensorsDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return InvalidArgumentError("unknown safetensors dtype '{}'", name);
}

SafetensorsDType ToSafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return SafetensorsDType::kF32;
    case DType::kBF16:
      return SafetensorsDType::kBF16;
    case DType::kF16:
      return SafetensorsDType::kF16;
    case DType::kF64:
      return SafetensorsDType::kF64;
  }
  return SafetensorsDType::kF32;
}

std::optional<DType> ToSluiceDType(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return DType::kF32;
    case SafetensorsDType::kBF16:
      return DType::kBF16;
    case SafetensorsDType::kF16:
      return DType::kF16;
    default:
      return std::nullopt;
  }
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsTensor::ShapeString() const {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                 const std::filesystem::path& path) {
  auto error = [&](std::string_view tensor, std::string_view field, std::string problem) {
    return DataLossError("{}: tensor '{}' field '{}': {}", path.string(), tensor, field, problem);
  };
  SafetensorsHeader header;
  header.data_start = 8 + json.size();
  const size_t first = json.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || json[first] != '{') {
    return DataLossError("{}: the header does not start with '{{': not a safetensors file",
                         path.string());
  }
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return DataLossError("{}: the {}-byte header is not a JSON object", path.string(), json.size());
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return error(name, "__metadata__", "not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return error(name, m.key(),
                       fmt::format("metadata values must be strings, got {}", m.value().dump()));
        }
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return error(name, "(entry)", "not an object");
    SafetensorsTensor t;
    t.name = name;
    auto dtype = v.find("dtype");
    if (dtype == v.end() || !dtype->is_string()) return error(name, "dtype", "missing");
    Result<SafetensorsDType> parsed = ParseSafetensorsDType(dtype->get<std::string>());
    if (!parsed.ok()) return error(name, "dtype", parsed.status().message());
    t.dtype = *parsed;
    auto shape = v.find("shape");
    if (shape == v.end() || !shape->is_array()) return error(name, "shape", "missing");
    for (const auto& d : *shape) {
      // Past int64 a dimension would turn negative in `shape` (and numel()).
      if (!d.is_number_unsigned() ||
          d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return error(name, "shape", fmt::format("{} is not a dimension", d.dump()));
      }
      t.shape.push_back(d.get<int64_t>());
    }
    auto offsets = v.find("data_offsets");
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return error(name, "data_offsets", "missing or not [begin, end]");
    }
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    if (t.end < t.begin) {
      return error(name, "data_offsets", fmt::format("[{}, {}) is reversed", t.begin, t.end));
    }
    // numel * size with overflow checks: a hostile shape must not wrap around.
    uint64_t bytes = SafetensorsDTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
        return error(name, "shape", fmt::format("{} overflows", t.ShapeString()));
      }
      bytes *= static_cast<uint64_t>(d);
    }
    if (t.end - t.begin != bytes) {
      return error(
          name, "data_offsets",
          fmt::format("[{}, {}) holds {} bytes but {} {} needs {}", t.begin, t.end, t.end - t.begin,
                      SafetensorsDTypeName(t.dtype), t.ShapeString(), bytes));
    }
    header.tensors.push_back(std::move(t));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const uint64_t data_bytes = file_size - header.data_start;
  uint64_t cursor = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : header.tensors) {
    if (t.begin < cursor) {
      return error(t.name, "data_offsets",
                   fmt::format("[{}, {}) overlaps tensor '{}' at [{}, {})", t.begin, t.end,
                               previous->name, previous->begin, previous->end));
    }
    if (t.begin > cursor) {
      return error(t.name, "data_offsets",
                   fmt::format("[{}, {}) leaves a hole: bytes [{}, {}) belong to no tensor",
                               t.begin, t.end, cursor, t.begin));
    }
    if (t.end > data_bytes) {
      return error(t.name, "data_offsets",
                   fmt::format("[{}, {}) is past the end of the data ({} bytes after the {}-byte "
                               "header): the file is truncated",
                               t.begin, t.end, data_bytes, header.data_start));
    }
    cursor = t.end;
    previous = &t;
  }
  if (cursor != data_bytes) {
    return DataLossError(
        "{}: the tensors cover {} bytes of data but the file has {} after the "
        "header",
        path.string(), cursor, data_bytes);
  }
  return header;
}

std::string EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json doc;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    doc["__metadata__"] = std::move(m);
  }
  for (const SafetensorsTensor& t : tensors) {
    doc[t.name] = {{"dtype", SafetensorsDTypeName(t.dtype)},
                   {"shape", t.shape},
                   {"data_offsets", {t.begin, t.end}}};
  }
  std::string json = doc.dump();
  json.resize((json.size() + 7) / 8 * 8, ' ');
  const uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

}  // namespace sluice::checkpoint
