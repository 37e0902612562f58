#include "engine/train/run_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/durable_file.h"
#include "runtime/foreign_call.h"

namespace sluice::train {

Status CreateRunDirectory(const std::string& dir) {
  return CreateDirectories(dir, "choose another run directory with --run-dir or run.dir");
}

Status RemoveStaleFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return IoError("cannot remove the stale {}: {}", path, internal::ErrnoText(errno));
  }
  return OkStatus();
}

}  // namespace sluice::train
