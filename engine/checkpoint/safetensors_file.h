// Reading safetensors: one file (SafetensorsFile) or a model split over several files with a
// model.safetensors.index.json (SafetensorsSource, which also takes a single file).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/safetensors_format.h"
#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr std::string_view kSafetensorsSingleName = "model.safetensors";

class SafetensorsFile {
 public:
  // Validates the header length against the file size and the header itself
  // (ParseSafetensorsHeader); DataLoss naming the file, the tensor and the field.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const std::vector<SafetensorsTensor>& tensors() const { return header_.tensors; }
  const SafetensorsTensor* Find(std::string_view name) const;

  // Bytes [offset, offset + bytes) of the tensor's data.
  Status ReadBytes(const SafetensorsTensor& tensor, uint64_t offset, uint64_t bytes,
                   void* dst) const;
  Status Read(const SafetensorsTensor& tensor, void* dst) const {
    return ReadBytes(tensor, 0, tensor.end - tensor.begin, dst);
  }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  ScopedFd fd_;
  SafetensorsHeader header_;
};

class SafetensorsSource {
 public:
  // `path`: a .safetensors file, a model.safetensors.index.json, or a directory holding either.
  // With an index, every file it names is opened and validated, and every tensor of its
  // weight_map must be in the file it names (DataLoss naming both otherwise).
  static Result<std::unique_ptr<SafetensorsSource>> Open(const std::filesystem::path& path);

  struct Located {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
  };
  // nullptr file when the source has no tensor `name`.
  Located Find(std::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsSource() = default;
  std::filesystem::path path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located, std::less<>> tensors_;
};

}  // namespace sluice::checkpoint
