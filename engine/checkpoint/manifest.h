// manifest.json of a checkpoint step directory: format version, step, world layout (size, ZeRO
// stage, every rank's files with their sizes), the tensors with their full shapes, the resolved
// config and the caller's free-form states (RNG, data loader, loss scaler, LR schedule).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint/shard_format.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

inline constexpr std::string_view kManifestFileName = "manifest.json";
inline constexpr std::string_view kManifestFormat = "sluice.checkpoint";
inline constexpr int kManifestVersion = 1;

struct ManifestFile {
  std::string path;  // relative to the step directory
  uint64_t bytes = 0;
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

nlohmann::ordered_json ManifestToJson(const Manifest& manifest);
// Validates the format name and version, the world layout (one entry per rank 0..size-1, each
// with a file per group) and the tensors; errors name `path` and the JSON field.
Result<Manifest> ManifestFromJson(const nlohmann::ordered_json& json,
                                  const std::filesystem::path& path);
Result<Manifest> ReadManifest(const std::filesystem::path& step_dir);

}  // namespace sluice::checkpoint
