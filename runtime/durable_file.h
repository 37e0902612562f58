// File primitives for the on-disk formats that must survive a crash: whole reads and writes that
// name the file and offset when they fail, fsync of files and directories, and the
// write-temporary / fsync / rename / fsync-parent sequence that replaces a file atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice {

// An owned file descriptor, closed on destruction (a failed close there is ignored: callers that
// care call Close()).
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  Status Close();

 private:
  int fd_ = -1;
};

// Opens a regular file for reading. Anything else (a directory, a device such as /dev/zero, a FIFO
// or a socket) is an InvalidArgument naming the path and what it is, returned at once: the open
// does not block on a FIFO without a writer.
Result<ScopedFd> OpenForRead(const std::filesystem::path& path);

// "directory", "character device", "block device", "FIFO", "socket", "symbolic link",
// "regular file" or "file of unknown type", for st_mode.
std::string_view FileTypeName(unsigned mode);
// For a descriptor opened with O_NONBLOCK, so that a FIFO could not block the open: the
// InvalidArgument OpenForRead returns unless it is a regular file; else clears O_NONBLOCK again
// (io_uring would honour it with -EAGAIN on a regular file).
Status UseAsRegularFile(int fd, const std::filesystem::path& path);
// The same refusal for a path whose open failed, when it exists and is not a regular file (a
// socket cannot be opened at all); OkStatus otherwise (the caller reports its open error).
Status CheckRegularPath(const std::filesystem::path& path);
// Creates `path` exclusively (O_EXCL): a leftover from a crashed attempt is an error, not data.
Result<ScopedFd> CreateExclusive(const std::filesystem::path& path);

// Writes all `bytes` at `offset`, retrying short writes and EINTR.
Status WriteAt(int fd, const void* data, size_t bytes, uint64_t offset,
               const std::filesystem::path& path);
// Reads exactly `bytes` at `offset`; a short read (end of file) is DataLoss naming the file, the
// offset, what was wanted and `what` (the field or tensor being read).
Status ReadAt(int fd, void* data, size_t bytes, uint64_t offset, const std::filesystem::path& path,
              std::string_view what);
Result<uint64_t> FileSize(int fd, const std::filesystem::path& path);

Status FsyncFd(int fd, const std::filesystem::path& path);
Status FsyncDirectory(const std::filesystem::path& dir);

// kSynced survives power loss (checkpoints); kUnsynced survives a crash of the process only, which
// is enough for records such as summary.json and costs no fsync stall on a busy disk.
enum class Durability { kSynced, kUnsynced };

// Replaces `path` with `contents` atomically: writes `path`.tmp (fsync'ed when kSynced), renames
// it over `path` (then fsyncs the parent directory when kSynced). Readers see either the old or
// the new file, never a part; a failure removes the temporary file.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                           Durability durability = Durability::kSynced);
Result<std::string> ReadWholeFile(const std::filesystem::path& path);

// Removes a file or a directory tree; a missing path is not an error.
Status RemoveTree(const std::filesystem::path& path);

// Creates `dir` and its missing parents; an existing directory is not an error. The error names
// the directory and the system's reason, then `remedy` (what the user can do) when given.
Status CreateDirectories(const std::filesystem::path& dir, std::string_view remedy = {});

}  // namespace sluice
