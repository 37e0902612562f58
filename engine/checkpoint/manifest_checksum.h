// The integrity fields of manifest.json (format version 2, docs/checkpoint_format.md):
//   "field_checksums": {"step": "xxh3:...", "states.data_loader.position": "xxh3:...", ...}
//       XXH3-64 of every field's canonical text, down to three levels ("config.settings.<key>",
//       "states.data_loader.<key>"; arrays such as "tensors" and "world.ranks" are one field);
//   "checksum": "xxh3:..." XXH3-64 of the canonical text of everything else (field_checksums
//       included).
// The canonical text is the compact JSON with every object's keys sorted bytewise, so a manifest
// reformatted or reordered by a tool still verifies, while any changed value does not. The
// checksum detects a change; the field checksums say which field it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice::checkpoint {

inline constexpr std::string_view kManifestChecksumKey = "checksum";
inline constexpr std::string_view kManifestFieldChecksumsKey = "field_checksums";

// Compact JSON, keys of every object sorted bytewise, invalid UTF-8 replaced by U+FFFD.
std::string CanonicalJson(const nlohmann::ordered_json& value);

std::string FormatChecksum(uint64_t checksum);  // "xxh3:0123456789abcdef"
std::optional<uint64_t> ParseChecksum(std::string_view text);

// Sets `field_checksums` and `checksum` of `manifest` (an object) from its other members.
void SealManifestJson(nlohmann::ordered_json* manifest);

// Verifies the two fields. DataLoss naming `path` and every field whose value no longer matches
// its checksum (changed, added or removed), or the `checksum` field itself when only it is off.
Status VerifyManifestJson(const nlohmann::ordered_json& manifest,
                          const std::filesystem::path& path);

}  // namespace sluice::checkpoint
