#include "engine/checkpoint/file_fingerprint.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "engine/checkpoint/manifest_checksum.h"
#include "offload/checksum.h"
#include "runtime/durable_file.h"

namespace sluice::checkpoint {
namespace {

constexpr uint64_t kReadChunkBytes = uint64_t{4} << 20;

}  // namespace

std::string FileFingerprint::ToString() const {
  return fmt::format("{} bytes, {}{}", bytes, FormatChecksum(checksum), sampled ? ", sampled" : "");
}

Result<FileFingerprint> FingerprintFile(const std::filesystem::path& path) {
  SLUICE_ASSIGN_OR_RETURN(ScopedFd fd, OpenForRead(path));
  FileFingerprint fingerprint;
  SLUICE_ASSIGN_OR_RETURN(fingerprint.bytes, FileSize(fd.get(), path));
  fingerprint.sampled = fingerprint.bytes > kFingerprintWholeFileBytes;
  offload::StreamingChecksum checksum;
  std::vector<char> buffer(static_cast<size_t>(std::min(
      fingerprint.bytes, fingerprint.sampled ? kFingerprintSampleBytes : kReadChunkBytes)));
  auto hash = [&](uint64_t offset, uint64_t bytes) -> Status {
    while (bytes > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, buffer.size()));
      SLUICE_RETURN_IF_ERROR(ReadAt(fd.get(), buffer.data(), n, offset, path, "the fingerprint"));
      checksum.Update(buffer.data(), n);
      offset += n;
      bytes -= n;
    }
    return OkStatus();
  };
  if (!fingerprint.sampled) {
    SLUICE_RETURN_IF_ERROR(hash(0, fingerprint.bytes));
  } else {
    const uint64_t last = fingerprint.bytes - kFingerprintSampleBytes;
    for (uint64_t i = 0; i < kFingerprintSamples; ++i) {
      // Evenly spaced from offset 0 to the last piece of the file, both included.
      const uint64_t offset = static_cast<uint64_t>(static_cast<unsigned __int128>(last) * i /
                                                    (kFingerprintSamples - 1));
      SLUICE_RETURN_IF_ERROR(hash(offset, kFingerprintSampleBytes));
    }
  }
  fingerprint.checksum = checksum.Digest();
  return fingerprint;
}

nlohmann::ordered_json FingerprintToJson(const FileFingerprint& fingerprint) {
  return {{"bytes", fingerprint.bytes},
          {"checksum", FormatChecksum(fingerprint.checksum)},
          {"sampled", fingerprint.sampled}};
}

Result<FileFingerprint> FingerprintFromJson(const nlohmann::ordered_json& json) {
  if (!json.is_object()) return InvalidArgumentError("a file fingerprint is not an object");
  FileFingerprint fingerprint;
  auto bytes = json.find("bytes");
  if (bytes == json.end() || !bytes->is_number_unsigned()) {
    return InvalidArgumentError("file fingerprint field 'bytes' is missing or not a size");
  }
  fingerprint.bytes = bytes->get<uint64_t>();
  auto checksum = json.find("checksum");
  std::optional<uint64_t> parsed;
  if (checksum != json.end() && checksum->is_string()) {
    parsed = ParseChecksum(checksum->get<std::string>());
  }
  if (!parsed.has_value()) {
    return InvalidArgumentError("file fingerprint field 'checksum' is missing or not a checksum");
  }
  fingerprint.checksum = *parsed;
  auto sampled = json.find("sampled");
  if (sampled == json.end() || !sampled->is_boolean()) {
    return InvalidArgumentError("file fingerprint field 'sampled' is missing or not a boolean");
  }
  fingerprint.sampled = sampled->get<bool>();
  return fingerprint;
}

}  // namespace sluice::checkpoint
