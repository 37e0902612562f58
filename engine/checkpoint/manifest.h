// manifest.json of a checkpoint step directory: format version, step, world layout (size, ZeRO
// stage, every rank's files with their sizes and checksums), the tensors with their full shapes,
// the resolved config and the caller's free-form states (RNG, data loader, loss scaler, LR
// schedule). Version 2 seals all of it with a checksum and per-field checksums
// (manifest_checksum.h), so an edited or corrupt manifest is refused naming the field; version 1
// (no checksums) is still read, with a warning.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/shard_format.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

inline constexpr std::string_view kManifestFileName = "manifest.json";
inline constexpr std::string_view kManifestFormat = "sluice.checkpoint";
inline constexpr int kManifestVersion = 2;
// Written before manifests carried checksums: read, but its metadata is unverified.
inline constexpr int kLegacyManifestVersion = 1;

struct ManifestFile {
  std::string path;  // relative to the step directory
  uint64_t bytes = 0;
  // The shard file's header_checksum (shard_format.h), which covers its table and, through the
  // table's block checksums, all of its data: binds the file to this manifest. Always set from
  // version 2 on; absent in version 1.
  std::optional<uint64_t> checksum;
};

struct ManifestRank {
  int rank = 0;
  std::map<ShardGroup, ManifestFile> files;
};

// One tensor as every rank agrees it is: its full shape and dtype.
struct ManifestTensor {
  StateKind kind = StateKind::kMasterWeights;
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

struct Manifest {
  int version = kManifestVersion;
  int64_t step = 0;
  int world_size = 1;
  int zero_stage = 0;
  std::vector<ManifestRank> ranks;
  std::vector<ManifestTensor> tensors;  // in the order rank 0 handed them to the writer
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  nlohmann::ordered_json states = nlohmann::ordered_json::object();
};

// The manifest of `manifest.version`: version 2 with its field checksums and checksum, version 1
// as version 1 wrote it.
nlohmann::ordered_json ManifestToJson(const Manifest& manifest);
// Validates the format name and version, for version 2 the checksums (before anything else, so
// a changed field is named as such), the world layout (one entry per rank 0..size-1, each with
// a file per group, with its checksum from version 2 on) and the tensors; errors name `path` and
// the JSON field.
Result<Manifest> ManifestFromJson(const nlohmann::ordered_json& json,
                                  const std::filesystem::path& path);
// Reads step_dir/manifest.json, refusing a duplicated key (naming it), then ManifestFromJson.
// Logs a warning for a version 1 manifest.
Result<Manifest> ReadManifest(const std::filesystem::path& step_dir);

}  // namespace sluice::checkpoint
