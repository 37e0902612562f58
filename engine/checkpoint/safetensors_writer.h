// Streaming safetensors writer: the header (every tensor's dtype, shape and offsets) is written
// first, then each tensor's bytes in the declared order, in as many pieces as the caller likes,
// so memory is bounded by what the caller holds (one tensor at a time for `sluice convert`).
// The file appears atomically: FILE.tmp, fsync, rename, fsync of the directory.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors_format.h"
#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

struct SafetensorsTensorSpec {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
};

class SafetensorsWriter {
 public:
  // InvalidArgument for a duplicate or empty name, "__metadata__" as a name or a negative
  // dimension.
  static Result<std::unique_ptr<SafetensorsWriter>> Create(
      const std::filesystem::path& path, const std::vector<SafetensorsTensorSpec>& tensors,
      const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();  // an unfinished file is removed

  // Appends the next `bytes` of data: the current tensor's, moving on to the next tensor when
  // one is complete. InvalidArgument when more bytes arrive than the tensors declare.
  Status Append(const void* data, size_t bytes);
  // The tensor the next Append() writes to (nullptr when all are complete).
  const SafetensorsTensor* current() const;
  // FailedPrecondition naming the first incomplete tensor; otherwise fsync, rename, fsync dir.
  Status Finish();

 private:
  SafetensorsWriter() = default;

  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  ScopedFd fd_;
  std::vector<SafetensorsTensor> tensors_;
  uint64_t data_start_ = 0;
  uint64_t written_ = 0;  // data bytes so far
  size_t current_ = 0;
  bool finished_ = false;
};

}  // namespace sluice::checkpoint
