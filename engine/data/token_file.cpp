#include "engine/data/token_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/data/mapped_read_guard.h"

namespace sluice::data {
namespace {

struct Layout {
  int64_t header_bytes = 0;
  int width = 1;
  int64_t num_tokens = 0;
  std::optional<LlmcHeader> llmc;
};

Result<Layout> ParseLlmc(const std::string& path, std::span<const std::byte> bytes) {
  const auto size = static_cast<int64_t>(bytes.size());
  if (size < kLlmcHeaderBytes) {
    return DataLossError(
        "llm.c token file '{}' is truncated inside its header: {} bytes, the header alone is {} "
        "bytes ({} bytes missing)",
        path, size, kLlmcHeaderBytes, kLlmcHeaderBytes - size);
  }
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  LlmcHeader h{header[0], header[1], header[2]};
  Layout layout;
  layout.header_bytes = kLlmcHeaderBytes;
  if (h.magic == kLlmcGpt2Magic) {
    if (h.version != kLlmcGpt2Version) {
      return InvalidArgumentError(
          "llm.c token file '{}': byte offset 4: unsupported version {} for magic {} (GPT-2 "
          "tokens); expected version {} (uint16 tokens)",
          path, h.version, h.magic, kLlmcGpt2Version);
    }
    layout.width = 2;
  } else if (h.magic == kLlmcLlama3Magic) {
    if (h.version != kLlmcLlama3Version) {
      return InvalidArgumentError(
          "llm.c token file '{}': byte offset 4: unsupported version {} for magic {} (Llama 3 "
          "tokens); expected version {} (uint32 tokens)",
          path, h.version, h.magic, kLlmcLlama3Version);
    }
    layout.width = 4;
  } else {
    return InvalidArgumentError(
        "llm.c token file '{}': byte offset 0: wrong magic {} (0x{:08x}), expected {} (GPT-2, "
        "uint16) or {} (Llama 3, uint32); if this is a headerless nanoGPT .bin set data.format: "
        "nanogpt_u16",
        path, h.magic, static_cast<uint32_t>(h.magic), kLlmcGpt2Magic, kLlmcLlama3Magic);
  }
  if (h.num_tokens <= 0) {
    return InvalidArgumentError(
        "llm.c token file '{}': byte offset 8: header token count is {}, expected a positive "
        "count",
        path, h.num_tokens);
  }
  const int64_t payload = size - kLlmcHeaderBytes;
  const int64_t expected = h.num_tokens * layout.width;
  if (payload < expected) {
    return DataLossError(
        "llm.c token file '{}' is truncated: the header (byte offset 8) declares {} tokens = {} "
        "bytes after the {}-byte header, the file holds {} ({} bytes missing, the data ends at "
        "byte offset {})",
        path, h.num_tokens, expected, kLlmcHeaderBytes, payload, expected - payload, size);
  }
  if (payload > expected) {
    return DataLossError(
        "llm.c token file '{}': the header (byte offset 8) declares {} tokens = {} bytes, but {} "
        "more bytes follow them from byte offset {}; header and data disagree",
        path, h.num_tokens, expected, payload - expected, kLlmcHeaderBytes + expected);
  }
  layout.num_tokens = h.num_tokens;
  layout.llmc = h;
  return layout;
}

Result<Layout> ParseLayout(const std::string& path, TokenFormat format,
                           std::span<const std::byte> bytes) {
  const auto size = static_cast<int64_t>(bytes.size());
  Layout layout;
  switch (format) {
    case TokenFormat::kText:
      layout.width = 1;
      layout.num_tokens = size;
      return layout;
    case TokenFormat::kNanogptU16:
      if (size % 2 != 0) {
        return DataLossError(
            "nanoGPT uint16 token file '{}' has an odd size ({} bytes): the token at byte offset "
            "{} is cut off (1 byte missing); the file is truncated or not uint16 tokens",
            path, size, size - 1);
      }
      layout.width = 2;
      layout.num_tokens = size / 2;
      return layout;
    case TokenFormat::kLlmcBin:
      return ParseLlmc(path, bytes);
    case TokenFormat::kAuto:
      break;
  }
  return InternalError("token file '{}': format auto reached the parser unresolved", path);
}

// The index of the first token >= vocab_size, or -1. Scans in blocks whose maximum the compiler
// vectorizes, and looks for the exact position only inside a block that fails.
template <typename T>
int64_t FirstOutOfVocab(std::span<const T> tokens, uint64_t vocab_size) {
  constexpr size_t kBlock = 1 << 16;
  for (size_t start = 0; start < tokens.size(); start += kBlock) {
    const std::span<const T> block = tokens.subspan(start, std::min(kBlock, tokens.size() - start));
    T max_id = 0;
    for (T t : block) max_id = std::max(max_id, t);
    if (max_id < vocab_size) continue;
    for (size_t i = 0; i < block.size(); ++i) {
      if (block[i] >= vocab_size) return static_cast<int64_t>(start + i);
    }
  }
  return -1;
}

}  // namespace

Result<TokenFile> TokenFile::Open(const std::string& path, TokenFormat format, int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("vocab_size {} for token file '{}' must be in [1, 2^31)",
                                vocab_size, path);
  }
  SLUICE_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  if (mapped.size() == 0) {
    return InvalidArgumentError("token file '{}' is empty (0 bytes): nothing to train on", path);
  }
  // Every look at the mapped bytes is guarded: a file cut short since it was mapped fails here
  // with DataLoss naming it, not with SIGBUS (mapped_read_guard.h).
  if (format == TokenFormat::kAuto) {
    Result<TokenFormat> detected = format;
    SLUICE_RETURN_IF_ERROR(GuardMappedRead(mapped, "detecting its format", [&] {
      detected = DetectTokenFormat(path, mapped.bytes());
    }));
    SLUICE_ASSIGN_OR_RETURN(format, std::move(detected));
  }
  Result<Layout> layout = InternalError("token file '{}': layout not parsed", path);
  SLUICE_RETURN_IF_ERROR(GuardMappedRead(
      mapped, "reading its header", [&] { layout = ParseLayout(path, format, mapped.bytes()); }));
  SLUICE_RETURN_IF_ERROR(layout.status());

  TokenFile file;
  file.format_ = format;
  file.header_bytes_ = layout->header_bytes;
  file.llmc_header_ = layout->llmc;
  file.tokens_ =
      TokenView(mapped.bytes().data() + layout->header_bytes, layout->num_tokens, layout->width);
  file.file_ = std::move(mapped);

  const auto vocab = static_cast<uint64_t>(vocab_size);
  const TokenView& tokens = file.tokens_;
  int64_t bad = -1;
  uint32_t bad_id = 0;
  SLUICE_RETURN_IF_ERROR(GuardMappedRead(file.file_, "checking its token ids", [&] {
    switch (tokens.width()) {
      case 1:
        if (vocab < 256) bad = FirstOutOfVocab(tokens.AsU8(), vocab);
        break;
      case 2:
        if (vocab < 65536) bad = FirstOutOfVocab(tokens.AsU16(), vocab);
        break;
      default:
        bad = FirstOutOfVocab(tokens.AsU32(), vocab);
        break;
    }
    if (bad >= 0) bad_id = tokens[bad];
  }));
  if (bad >= 0) {
    return InvalidArgumentError(
        "{} token file '{}': byte offset {} (token {}): token id {} is >= vocab_size {}; the file "
        "was tokenized for a larger vocabulary than model.vocab_size",
        TokenFormatName(format), path, file.TokenByteOffset(bad), bad, bad_id, vocab_size);
  }
  return file;
}

}  // namespace sluice::data
