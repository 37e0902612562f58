// A content fingerprint of an input file (the training data a checkpoint was trained on), so a
// resume can tell whether the file it reads now is the same: its size and XXH3-64 of its bytes,
// all of them up to kFingerprintWholeFileBytes, beyond that of kFingerprintSamples evenly
// spaced pieces of kFingerprintSampleBytes (first and last included), which bounds the read to
// 64 MiB while still telling apart files of the same size with different content.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/status.h"

namespace sluice::checkpoint {

inline constexpr uint64_t kFingerprintWholeFileBytes = uint64_t{1} << 30;
inline constexpr uint64_t kFingerprintSamples = 1024;
inline constexpr uint64_t kFingerprintSampleBytes = uint64_t{64} << 10;

struct FileFingerprint {
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  bool sampled = false;  // over samples, not every byte

  bool operator==(const FileFingerprint&) const = default;
  // "1048576 bytes, xxh3:0123456789abcdef" (", sampled")
  std::string ToString() const;
};

// IoError / NotFound naming `path`.
Result<FileFingerprint> FingerprintFile(const std::filesystem::path& path);

// {"bytes": N, "checksum": "xxh3:...", "sampled": false}
nlohmann::ordered_json FingerprintToJson(const FileFingerprint& fingerprint);
// InvalidArgument naming the field for anything else.
Result<FileFingerprint> FingerprintFromJson(const nlohmann::ordered_json& json);

}  // namespace sluice::checkpoint
