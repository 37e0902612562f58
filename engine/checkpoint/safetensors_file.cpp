#include "engine/checkpoint/safetensors_file.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>

namespace sluice::checkpoint {

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::filesystem::path& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  SLUICE_ASSIGN_OR_RETURN(file->fd_, OpenForRead(path));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, FileSize(file->fd_.get(), path));
  if (size < 8) {
    return DataLossError(
        "{}: {} bytes, too short for the 8-byte header length of a safetensors "
        "file",
        path.string(), size);
  }
  uint64_t n = 0;
  SLUICE_RETURN_IF_ERROR(ReadAt(file->fd_.get(), &n, 8, 0, path, "the header length"));
  if (n > kMaxSafetensorsHeaderBytes) {
    return DataLossError(
        "{}: header length {} (offset 0) exceeds the {}-byte limit: not a "
        "safetensors file, or a corrupt one",
        path.string(), n, kMaxSafetensorsHeaderBytes);
  }
  if (n > size - 8) {
    return DataLossError(
        "{}: header length {} (offset 0) is past the end of the {}-byte file: "
        "truncated",
        path.string(), n, size);
  }
  std::string json(n, '\0');
  SLUICE_RETURN_IF_ERROR(ReadAt(file->fd_.get(), json.data(), n, 8, path, "the JSON header"));
  SLUICE_ASSIGN_OR_RETURN(file->header_, ParseSafetensorsHeader(json, size, path));
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  for (const SafetensorsTensor& t : header_.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status SafetensorsFile::ReadBytes(const SafetensorsTensor& tensor, uint64_t offset, uint64_t bytes,
                                  void* dst) const {
  SLUICE_CHECK_LE(offset + bytes, tensor.end - tensor.begin) << tensor.name;
  return ReadAt(fd_.get(), dst, bytes, header_.data_start + tensor.begin + offset, path_,
                fmt::format("tensor '{}'", tensor.name));
}

Result<std::unique_ptr<SafetensorsSource>> SafetensorsSource::Open(
    const std::filesystem::path& path) {
  std::unique_ptr<SafetensorsSource> source(new SafetensorsSource());
  std::error_code ec;
  std::filesystem::path target = path;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / kSafetensorsIndexName, ec)) {
      target = path / kSafetensorsIndexName;
    } else if (std::filesystem::exists(path / kSafetensorsSingleName, ec)) {
      target = path / kSafetensorsSingleName;
    } else {
      return NotFoundError("{} holds neither {} nor {}", path.string(), kSafetensorsIndexName,
                           kSafetensorsSingleName);
    }
  }
  source->path_ = target;
  if (target.extension() != ".json") {
    SLUICE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(target));
    for (const SafetensorsTensor& t : file->tensors()) {
      source->tensors_[t.name] = Located{file.get(), &t};
    }
    source->files_.push_back(std::move(file));
    return source;
  }

  SLUICE_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(target));
  nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return DataLossError("{}: not a JSON object", target.string());
  }
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) {
    return DataLossError("{}: field 'weight_map' is missing or not an object", target.string());
  }
  std::map<std::string, SafetensorsFile*> opened;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string()) {
      return DataLossError("{}: field 'weight_map.{}' is not a file name", target.string(),
                           it.key());
    }
    const std::string file_name = it.value().get<std::string>();
    if (file_name.empty() || file_name.find('/') != std::string::npos) {
      return DataLossError("{}: field 'weight_map.{}' = '{}' is not a file name beside the index",
                           target.string(), it.key(), file_name);
    }
    auto found = opened.find(file_name);
    if (found == opened.end()) {
      SLUICE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(target.parent_path() / file_name));
      found = opened.emplace(file_name, file.get()).first;
      source->files_.push_back(std::move(file));
    }
    const SafetensorsTensor* tensor = found->second->Find(it.key());
    if (tensor == nullptr) {
      return DataLossError("{}: weight_map puts tensor '{}' in {}, which does not hold it",
                           target.string(), it.key(), found->second->path().string());
    }
    source->tensors_[it.key()] = Located{found->second, tensor};
  }
  return source;
}

SafetensorsSource::Located SafetensorsSource::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? Located{} : it->second;
}

std::vector<std::string> SafetensorsSource::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, located] : tensors_) names.push_back(name);
  return names;
}

}  // namespace sluice::checkpoint
