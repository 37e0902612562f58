#include "engine/data/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "runtime/durable_file.h"
#include "runtime/foreign_call.h"

namespace sluice::data {
namespace {

Status ErrnoStatus(int err, std::string_view what, const std::string& path) {
  const std::string text = ::sluice::internal::ErrnoText(err);
  if (err == ENOENT) return NotFoundError("cannot {} '{}': {}", what, path, text);
  return IoError("cannot {} '{}': {}", what, path, text);
}

}  // namespace

Result<MappedFile> MappedFile::Open(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(ScopedFd opened, OpenForRead(path).WithContext("token file"));
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
  // The mapping alone would keep the file alive; the descriptor stays open so that a read that
  // faults can say how large the mapped file is now (CurrentSize), whatever its path names since.
  file.fd_ = opened.release();
  return file;
}

Result<uint64_t> MappedFile::CurrentSize() const {
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
    return ErrnoStatus(fd_ < 0 ? EBADF : errno, "stat the mapped token file", path_);
  }
  return static_cast<uint64_t>(st.st_size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) {
    ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  size_ = 0;
}

}  // namespace sluice::data
