#include "engine/data/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <utility>

#include "runtime/durable_file.h"
#include "runtime/foreign_call.h"

namespace sluice::data {
namespace {

Status ErrnoStatus(int err, std::string_view what, const std::string& path) {
  const std::string text = internal::ErrnoText(err);
  if (err == ENOENT) return NotFoundError("cannot {} '{}': {}", what, path, text);
  return IoError("cannot {} '{}': {}", what, path, text);
}

}  // namespace

Result<MappedFile> MappedFile::Open(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(const ScopedFd opened, OpenForRead(path).WithContext("token file"));
  const int fd = opened.get();
  SLUICE_ASSIGN_OR_RETURN(const uint64_t size, FileSize(fd, path));
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(size);
  if (file.size_ > 0) {
    void* addr = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) return ErrnoStatus(errno, "mmap token file", path);
    file.data_ = static_cast<const std::byte*>(addr);
  }
  // The mapping keeps the file alive; the descriptor closes with `opened`.
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) {
    ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
  }
  size_ = 0;
}

}  // namespace sluice::data
