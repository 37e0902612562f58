#include "runtime/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>

#include "runtime/foreign_call.h"

namespace sluice {
namespace {

// Linux moves at most ~2 GiB per read/write call; larger requests come back short anyway.
constexpr size_t kMaxIoBytes = size_t{1} << 30;

Status ErrnoStatus(std::string_view call, const std::filesystem::path& path, int err,
                   uint64_t offset) {
  return IoError("{} {} at offset {}: {}", call, path.string(), offset, internal::ErrnoText(err));
}

}  // namespace

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Status ScopedFd::Close() {
  if (fd_ < 0) return OkStatus();
  int fd = release();
  SLUICE_TRY_SYS(::close(fd));
  return OkStatus();
}

Result<ScopedFd> OpenForRead(const std::filesystem::path& path) {
  // O_NONBLOCK so that a FIFO without a writer is refused below instead of blocking the open;
  // cleared again for the regular file it turns out to be.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return NotFoundError("{} does not exist", path.string());
    SLUICE_RETURN_IF_ERROR(CheckRegularPath(path));  // a socket cannot be opened (ENXIO)
    return IoError("open {} for reading: {}", path.string(), internal::ErrnoText(err));
  }
  ScopedFd owned(fd);
  SLUICE_RETURN_IF_ERROR(UseAsRegularFile(fd, path));
  return owned;
}

std::string_view FileTypeName(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "regular file";
    case S_IFDIR:
      return "directory";
    case S_IFCHR:
      return "character device";
    case S_IFBLK:
      return "block device";
    case S_IFIFO:
      return "FIFO";
    case S_IFSOCK:
      return "socket";
    case S_IFLNK:
      return "symbolic link";
    default:
      return "file of unknown type";
  }
}

namespace {

Status NotRegular(const std::filesystem::path& path, unsigned mode) {
  return InvalidArgumentError("{} is a {}, not a regular file: give the path of a file",
                              path.string(), FileTypeName(mode));
}

}  // namespace

Status UseAsRegularFile(int fd, const std::filesystem::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return IoError("fstat {}: {}", path.string(), internal::ErrnoText(errno));
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return IoError("fcntl {}: {}", path.string(), internal::ErrnoText(errno));
  }
  return OkStatus();
}

Status CheckRegularPath(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return OkStatus();
  return NotRegular(path, st.st_mode);
}

Result<ScopedFd> CreateExclusive(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError("create {}: {}", path.string(), internal::ErrnoText(errno));
  }
  return ScopedFd(fd);
}

Status WriteAt(int fd, const void* data, size_t bytes, uint64_t offset,
               const std::filesystem::path& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd, p, std::min(bytes, kMaxIoBytes), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path, errno, offset);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return OkStatus();
}

Status ReadAt(int fd, void* data, size_t bytes, uint64_t offset, const std::filesystem::path& path,
              std::string_view what) {
  char* p = static_cast<char*>(data);
  const uint64_t start = offset;
  const size_t wanted = bytes;
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, std::min(bytes, kMaxIoBytes), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", path, errno, offset);
    }
    if (n == 0) {
      return DataLossError(
          "{}: {} ({} bytes at offset {}) ends at offset {}: the file is truncated", path.string(),
          what, wanted, start, offset);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return OkStatus();
}

Result<uint64_t> FileSize(int fd, const std::filesystem::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return IoError("fstat {}: {}", path.string(), internal::ErrnoText(errno));
  }
  return static_cast<uint64_t>(st.st_size);
}

Status FsyncFd(int fd, const std::filesystem::path& path) {
  if (::fsync(fd) != 0) {
    return IoError("fsync {}: {}", path.string(), internal::ErrnoText(errno));
  }
  return OkStatus();
}

Status FsyncDirectory(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return IoError("open directory {} for fsync: {}", dir.string(), internal::ErrnoText(errno));
  }
  ScopedFd owned(fd);
  SLUICE_RETURN_IF_ERROR(FsyncFd(fd, dir));
  return owned.Close();
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                           Durability durability) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  std::error_code ec;
  std::filesystem::remove(tmp, ec);  // a leftover of a crashed update
  SLUICE_ASSIGN_OR_RETURN(ScopedFd fd, CreateExclusive(tmp));
  const bool sync = durability == Durability::kSynced;
  Status status = WriteAt(fd.get(), contents.data(), contents.size(), 0, tmp);
  if (status.ok() && sync) status = FsyncFd(fd.get(), tmp);
  if (status.ok()) status = fd.Close();
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status =
        IoError("rename {} to {}: {}", tmp.string(), path.string(), internal::ErrnoText(errno));
  }
  if (!status.ok()) {
    std::filesystem::remove(tmp, ec);  // nothing half-written is left behind
    return status;
  }
  return sync ? FsyncDirectory(path.has_parent_path() ? path.parent_path() : ".") : OkStatus();
}

Result<std::string> ReadWholeFile(const std::filesystem::path& path) {
  SLUICE_ASSIGN_OR_RETURN(ScopedFd fd, OpenForRead(path));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, FileSize(fd.get(), path));
  std::string contents(size, '\0');
  SLUICE_RETURN_IF_ERROR(ReadAt(fd.get(), contents.data(), size, 0, path, "the whole file"));
  return contents;
}

Status RemoveTree(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return IoError("remove {}: {}", path.string(), ec.message());
  return OkStatus();
}

Status CreateDirectories(const std::filesystem::path& dir, std::string_view remedy) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec) return OkStatus();
  if (remedy.empty())
    return IoError("cannot create the directory {}: {}", dir.string(), ec.message());
  return IoError("cannot create the directory {}: {}; {}", dir.string(), ec.message(), remedy);
}

}  // namespace sluice
