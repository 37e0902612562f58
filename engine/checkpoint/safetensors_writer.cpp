#include "engine/checkpoint/safetensors_writer.h"

#include <cstdio>
#include <set>
#include <system_error>

#include "runtime/foreign_call.h"

namespace sluice::checkpoint {

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::filesystem::path& path, const std::vector<SafetensorsTensorSpec>& specs,
    const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsWriter> writer(new SafetensorsWriter());
  writer->path_ = path;
  writer->tmp_path_ = path;
  writer->tmp_path_ += ".tmp";
  std::set<std::string> names;
  uint64_t cursor = 0;
  for (const SafetensorsTensorSpec& spec : specs) {
    if (spec.name.empty() || spec.name == "__metadata__" || !names.insert(spec.name).second) {
      return InvalidArgumentError("safetensors tensor name '{}' is empty, reserved or repeated",
                                  spec.name);
    }
    SafetensorsTensor t;
    t.name = spec.name;
    t.dtype = spec.dtype;
    t.shape = spec.shape;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return InvalidArgumentError("safetensors tensor '{}': negative dimension in {}", t.name,
                                    t.ShapeString());
      }
    }
    t.begin = cursor;
    t.end = cursor + static_cast<uint64_t>(t.numel()) * SafetensorsDTypeSize(t.dtype);
    cursor = t.end;
    writer->tensors_.push_back(std::move(t));
  }
  const std::string header = EncodeSafetensorsHeader(writer->tensors_, metadata);
  writer->data_start_ = header.size();
  std::error_code ec;
  std::filesystem::remove(writer->tmp_path_, ec);  // left by a crashed conversion
  SLUICE_ASSIGN_OR_RETURN(writer->fd_, CreateExclusive(writer->tmp_path_));
  SLUICE_RETURN_IF_ERROR(
      WriteAt(writer->fd_.get(), header.data(), header.size(), 0, writer->tmp_path_));
  // Skip tensors with no bytes so current() always names one that still needs data.
  while (writer->current_ < writer->tensors_.size() &&
         writer->tensors_[writer->current_].end == writer->tensors_[writer->current_].begin) {
    ++writer->current_;
  }
  return writer;
}

SafetensorsWriter::~SafetensorsWriter() {
  // Also after a failed Finish (its rename), whose descriptor is already closed.
  if (!finished_ && !tmp_path_.empty()) {
    if (fd_.valid()) (void)fd_.Close();
    std::error_code ec;
    std::filesystem::remove(tmp_path_, ec);
  }
}

const SafetensorsTensor* SafetensorsWriter::current() const {
  return current_ < tensors_.size() ? &tensors_[current_] : nullptr;
}

Status SafetensorsWriter::Append(const void* data, size_t bytes) {
  SLUICE_CHECK(!finished_) << "Append after Finish";
  const uint64_t total = tensors_.empty() ? 0 : tensors_.back().end;
  if (bytes > total - written_) {
    const SafetensorsTensor* t = current();
    return InvalidArgumentError("safetensors {}: {} bytes appended after {} of {} data bytes{}",
                                path_.string(), bytes, written_, total,
                                t ? fmt::format(" (tensor '{}')", t->name) : "");
  }
  SLUICE_RETURN_IF_ERROR(WriteAt(fd_.get(), data, bytes, data_start_ + written_, tmp_path_));
  written_ += bytes;
  while (current_ < tensors_.size() && tensors_[current_].end <= written_) ++current_;
  return OkStatus();
}

Status SafetensorsWriter::Finish() {
  if (const SafetensorsTensor* t = current()) {
    return FailedPreconditionError(
        "safetensors {}: tensor '{}' has {} of its {} bytes; the file was not finished",
        path_.string(), t->name, written_ - t->begin, t->end - t->begin);
  }
  SLUICE_RETURN_IF_ERROR(FsyncFd(fd_.get(), tmp_path_));
  SLUICE_RETURN_IF_ERROR(fd_.Close());
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return IoError("rename {} to {}: {}", tmp_path_.string(), path_.string(),
                   internal::ErrnoText(errno));
  }
  finished_ = true;
  return FsyncDirectory(path_.has_parent_path() ? path_.parent_path() : ".");
}

}  // namespace sluice::checkpoint
