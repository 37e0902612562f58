#include "engine/train/run_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "runtime/foreign_call.h"

namespace sluice::train {
namespace {

Status WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n;
    SLUICE_TRY_SYS(n = ::write(fd, text.data(), text.size()));
    text.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

Status WriteWhole(const std::string& path, std::string_view text) {
  int fd;
  SLUICE_TRY_SYS(fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  Status status = WriteAll(fd, text);
  ::close(fd);
  return status;
}

}  // namespace

Status CreateRunDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return IoError(
        "cannot create the run directory {}: {}; choose another with --run-dir or "
        "run.dir",
        dir, error.message());
  }
  return OkStatus();
}

Status RemoveStaleFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return IoError("cannot remove the stale {}: {}", path, internal::ErrnoText(errno));
  }
  return OkStatus();
}

Status WriteFileAtomically(const std::string& path, std::string_view text) {
  const std::string temp = path + ".tmp";
  Status status = WriteWhole(temp, text);
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = IoError("rename({}, {}) failed: {}", temp, path, internal::ErrnoText(errno));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return std::move(status).WithContext(fmt::format("writing {}", path));
  }
  return OkStatus();
}

}  // namespace sluice::train
