#include "runtime/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "runtime/foreign_call.h"

namespace sluice {
namespace {

// The pid the holder wrote, or "unknown" (it may be between its lock and its write).
std::string HolderPid(int fd) {
  char text[32] = {};
  const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  std::string pid(text, n > 0 ? static_cast<size_t>(n) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock
}

Result<FileLock> FileLock::Acquire(const std::string& path, std::string_view what,
                                   std::string_view resource, std::string_view advice) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    const int err = errno;
    return FailedPreconditionError("cannot open the lock file {} of {} {}: {}", path, what,
                                   resource, internal::ErrnoText(err));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string pid = err == EWOULDBLOCK ? HolderPid(fd) : "";
    close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPreconditionError("{} {} is in use by another run (pid {}, lock file {}): {}",
                                     what, resource, pid, path, advice);
    }
    return FailedPreconditionError("cannot lock {} of {} {}: {}", path, what, resource,
                                   internal::ErrnoText(err));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    const int err = errno;
    close(fd);
    return FailedPreconditionError("cannot write the lock file {} of {} {}: {}", path, what,
                                   resource, internal::ErrnoText(err));
  }
  FileLock lock;
  lock.fd_ = fd;
  lock.path_ = path;
  return lock;
}

}  // namespace sluice
