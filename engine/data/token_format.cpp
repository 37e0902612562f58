#include "engine/data/token_format.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>

namespace sluice::data {
namespace {

bool HasTextExtension(std::string_view path) {
  const size_t slash = path.find_last_of('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  if (dot == std::string_view::npos) return false;
  std::string ext(name.substr(dot + 1));
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == "txt" || ext == "text" || ext == "md";
}

// The offset of the first byte that rules out text (a NUL or malformed UTF-8), if any. A
// multi-byte sequence cut off by the end of `bytes` is accepted: the sniff window may split one.
std::optional<size_t> FirstNonTextByte(std::span<const std::byte> bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (b == 0) return i;
    size_t continuation = 0;
    if (b < 0x80) {
      continuation = 0;
    } else if (b >= 0xC2 && b <= 0xDF) {
      continuation = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      continuation = 2;
    } else if (b >= 0xF0 && b <= 0xF4) {
      continuation = 3;
    } else {
      return i;
    }
    for (size_t k = 1; k <= continuation; ++k) {
      if (i + k >= bytes.size()) return std::nullopt;
      const auto c = static_cast<unsigned char>(bytes[i + k]);
      if ((c & 0xC0) != 0x80) return i;
    }
    i += continuation + 1;
  }
  return std::nullopt;
}

}  // namespace

std::string_view TokenFormatName(TokenFormat format) {
  switch (format) {
    case TokenFormat::kAuto:
      return "auto";
    case TokenFormat::kText:
      return "text";
    case TokenFormat::kNanogptU16:
      return "nanogpt_u16";
    case TokenFormat::kLlmcBin:
      return "llmc_bin";
  }
  return "unknown";
}

Result<TokenFormat> ParseTokenFormat(std::string_view name) {
  for (TokenFormat f :
       {TokenFormat::kAuto, TokenFormat::kText, TokenFormat::kNanogptU16, TokenFormat::kLlmcBin}) {
    if (name == TokenFormatName(f)) return f;
  }
  return InvalidArgumentError(
      "unknown token file format '{}': expected one of auto, text, nanogpt_u16, llmc_bin", name);
}

Result<TokenFormat> DetectTokenFormat(const std::string& path, std::span<const std::byte> bytes) {
  if (bytes.empty()) {
    return InvalidArgumentError("token file '{}' is empty (0 bytes): nothing to train on", path);
  }
  if (bytes.size() >= 4) {
    int32_t magic = 0;
    std::memcpy(&magic, bytes.data(), sizeof(magic));
    if (magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic) return TokenFormat::kLlmcBin;
  }
  if (HasTextExtension(path)) return TokenFormat::kText;
  const std::optional<size_t> non_text =
      FirstNonTextByte(bytes.first(std::min(bytes.size(), kTextSniffBytes)));
  if (!non_text.has_value()) return TokenFormat::kText;
  if (bytes.size() % 2 == 0) return TokenFormat::kNanogptU16;
  return InvalidArgumentError(
      "cannot detect the format of '{}': byte offset 0 holds no llm.c magic, the name has no "
      ".txt/.text/.md extension, byte offset {} is not text (NUL or invalid UTF-8), and its size "
      "{} bytes is odd so it is not uint16 tokens either; set data.format explicitly",
      path, *non_text, bytes.size());
}

}  // namespace sluice::data
