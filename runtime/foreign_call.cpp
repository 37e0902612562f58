#include "runtime/foreign_call.h"

#include <fmt/format.h>

#include <cstring>

namespace sluice::internal {

std::string ErrnoText(int err) {
  const char* name = strerrorname_np(err);
  return fmt::format("{} ({})", std::strerror(err), name != nullptr ? name : "?");
}

Status ForeignCallError(const char* library, const char* call, const std::string& error,
                        const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return IoError("{} call `{}` failed: {} [{}:{}]", library, call, error,
                 base != nullptr ? base + 1 : file, line);
}

}  // namespace sluice::internal
