// Status values for failed I/O: the code follows the errno (full disk or file-size limit ->
// ResourceExhausted, anything else -> IoError) and the message names file, offset and errno.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "runtime/foreign_call.h"
#include "runtime/status.h"

namespace sluice::offload::internal {

using ::sluice::internal::ErrnoText;

StatusCode CodeForErrno(int err);

// " (the filesystem is full: ...)" for ENOSPC/EDQUOT/EFBIG, "" otherwise.
std::string_view SpaceAdvice(int err);

template <typename... Args>
Status ErrnoStatus(int err, fmt::format_string<Args...> format, Args&&... args) {
  return Status(CodeForErrno(err), fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace sluice::offload::internal
