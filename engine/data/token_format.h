// The token file formats Sluice reads, their names (the `data.format` config values), the llm.c
// header constants, and `auto` detection. docs/data_formats.md describes each format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice::data {

enum class TokenFormat {
  kAuto,        // decided from the file: DetectTokenFormat()
  kText,        // raw bytes; the byte tokenizer maps each byte to token id 0..255
  kNanogptU16,  // nanoGPT prepare.py train.bin/val.bin: flat little-endian uint16, no header
  kLlmcBin,     // llm.c dev/data: 256 x int32 header, then uint16 (GPT-2) or uint32 (Llama 3)
};

// "auto", "text", "nanogpt_u16", "llmc_bin": the same spellings as the `data.format` setting.
std::string_view TokenFormatName(TokenFormat format);
Result<TokenFormat> ParseTokenFormat(std::string_view name);

// llm.c's data_common.py write_datafile(): header[0] magic, [1] version, [2] token count, the rest
// zero. Each magic comes with exactly one version and one token width.
inline constexpr int kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
inline constexpr int32_t kLlmcGpt2Magic = 20240520;    // GPT-2 tokens
inline constexpr int32_t kLlmcGpt2Version = 1;         // uint16 tokens
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // Llama 3 tokens
inline constexpr int32_t kLlmcLlama3Version = 7;       // uint32 tokens

// How many leading bytes `auto` inspects to tell text from binary tokens.
inline constexpr size_t kTextSniffBytes = 64 * 1024;

// Resolves `auto` for the file at `path` whose contents are `bytes`, in this order:
//   1. the first int32 is an llm.c magic                      -> kLlmcBin
//   2. the name ends in .txt, .text or .md                    -> kText
//   3. the first kTextSniffBytes hold no NUL and valid UTF-8  -> kText
//   4. the size is even                                       -> kNanogptU16
// and otherwise fails saying why each rule did not apply. An empty file is an error.
Result<TokenFormat> DetectTokenFormat(const std::string& path, std::span<const std::byte> bytes);

}  // namespace sluice::data
