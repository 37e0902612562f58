// A read-only memory map of a whole file: token files are read in place, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/status.h"

namespace sluice::data {

class MappedFile {
 public:
  // Maps `path` read-only. A missing file is NotFound, any other open/stat/mmap failure IoError;
  // both name the path and the errno text. An empty file maps to an empty span (mmap rejects a
  // zero length), so callers can report "empty" themselves.
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }  // when mapped

  // The size of the mapped file now (fstat of the descriptor kept open for this): the file
  // itself, even when its path has since been renamed over or removed. A file that shrank below
  // size() makes reads of the lost pages fault with SIGBUS (engine/data/mapped_read_guard.h).
  Result<uint64_t> CurrentSize() const;

 private:
  void Reset();

  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace sluice::data
