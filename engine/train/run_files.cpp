#include "engine/train/run_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "runtime/foreign_call.h"

namespace sluice::train {

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

}  // namespace sluice::train
