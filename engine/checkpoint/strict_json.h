// Parsing JSON that Sluice wrote and must read back exactly (a checkpoint's manifest.json): a key
// that appears twice in one object is refused, naming it, instead of one of the two values
// silently winning.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "runtime/status.h"

namespace sluice::checkpoint {

inline constexpr size_t kMaxJsonDepth = 64;

// DataLoss naming `path` for text that is not JSON or nests objects and arrays deeper than
// kMaxJsonDepth, and `path` plus the field's path ("states.data_loader.position",
// "tensors[3].name") for a duplicated key.
Result<nlohmann::ordered_json> ParseJsonWithoutDuplicateKeys(std::string_view text,
                                                             const std::filesystem::path& path);

}  // namespace sluice::checkpoint
