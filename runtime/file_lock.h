// One owner per run directory and per swap file: an advisory lock (flock) on a lock file, held
// while the FileLock lives and released by the kernel when the process dies, so a crashed run
// never leaves a stale lock. The holder writes its pid into the file, which is how a second run
// learns whom it collided with.
#pragma once

#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice {

class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  // Creates `path` if needed and locks it without waiting. When another open file holds it (any
  // process, this one included): FailedPrecondition "<what> <resource> is in use by another run
  // (pid N, lock file <path>): <advice>". Other failures name the path and errno.
  static Result<FileLock> Acquire(const std::string& path, std::string_view what,
                                  std::string_view resource, std::string_view advice);

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace sluice
