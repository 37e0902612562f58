// Writes token files in the formats TokenFile reads, atomically (temp file, fsync, rename), so
// that text can be converted once into a compact binary and an interrupted write leaves nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/status.h"

namespace sluice::data {

// nanoGPT raw: the ids as little-endian uint16, no header. Fails on an id above 65535.
Status WriteNanogptU16(const std::string& path, std::span<const int32_t> ids);

enum class LlmcTokenKind {
  kGpt2,    // magic 20240520, version 1, uint16 ids
  kLlama3,  // magic 20240801, version 7, uint32 ids
};
// llm.c: the 1024-byte header (magic, version, count, zeros), then the ids. Fails on an id that
// does not fit the kind's width, or on more than 2^31 - 1 tokens (the header count is int32).
Status WriteLlmc(const std::string& path, std::span<const int32_t> ids, LlmcTokenKind kind);

}  // namespace sluice::data
