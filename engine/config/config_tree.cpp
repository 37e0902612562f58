#include "engine/config/config_tree.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "runtime/durable_file.h"
#include "runtime/size_format.h"

namespace sluice {

std::string ConfigNode::Describe() const {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kMap:
      return "a mapping";
    case Kind::kSequence:
      return "a list";
    case Kind::kScalar:
      switch (scalar_kind) {
        case ScalarKind::kString:
          return fmt::format("the string \"{}\"", text);
        case ScalarKind::kNumber:
          return fmt::format("the number {}", text);
        case ScalarKind::kBool:
          return fmt::format("the boolean {}", text);
        case ScalarKind::kPlain:
          return fmt::format("\"{}\"", text);
      }
  }
  return "?";
}

std::string FormatSourcePos(std::string_view source_name, SourcePos pos) {
  if (pos.line <= 0) return std::string(source_name);
  return fmt::format("{}:{}:{}", source_name, pos.line, pos.column);
}

Status CheckConfigSize(uint64_t bytes, std::string_view source_name) {
  if (bytes <= kMaxConfigBytes) return OkStatus();
  return InvalidArgumentError(
      "{}: {} is larger than a config can be ({}; real ones are a few KiB): is this the right "
      "file?",
      source_name, FormatBytes(bytes), FormatBytes(kMaxConfigBytes));
}

Result<ConfigNode> ParseConfigText(std::string_view text, ConfigFormat format,
                                   std::string_view source_name) {
  SLUICE_RETURN_IF_ERROR(CheckConfigSize(text.size(), source_name));
  return format == ConfigFormat::kJson ? ParseJsonConfig(text, source_name)
                                       : ParseYamlConfig(text, source_name);
}

Result<ConfigNode> ReadConfigFile(const std::string& path) {
  // Before reading: the whole file is read into memory. Not a regular file: ReadWholeFile says.
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (!ec) SLUICE_RETURN_IF_ERROR(CheckConfigSize(size, path));
  Result<std::string> read = ReadWholeFile(path);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kNotFound) {
      return NotFoundError("config file {} does not exist", path);
    }
    return std::move(read).WithContext("config file").status();
  }
  std::string text = std::move(read).value();

  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  ConfigFormat format = ConfigFormat::kYaml;
  if (ends_with(".json")) {
    format = ConfigFormat::kJson;
  } else if (!ends_with(".yaml") && !ends_with(".yml")) {
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{') format = ConfigFormat::kJson;
  }
  return ParseConfigText(text, format, path);
}

Result<ConfigNode> ParseConfigValueText(std::string_view text, std::string_view source_name) {
  return ParseYamlConfig(text, source_name, /*positions=*/false);
}

}  // namespace sluice
