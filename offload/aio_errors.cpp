#include "offload/aio_errors.h"

#include <cerrno>

namespace sluice::offload::internal {

StatusCode CodeForErrno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return StatusCode::kResourceExhausted;
    case ENOENT:
      return StatusCode::kNotFound;
    default:
      return StatusCode::kIoError;
  }
}

std::string_view SpaceAdvice(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return " (the filesystem is full: free space there, or point nvme_path at a larger one)";
    case EFBIG:
      return " (the file size limit was reached: check `ulimit -f` and the filesystem's maximum "
             "file size)";
    default:
      return "";
  }
}

}  // namespace sluice::offload::internal
