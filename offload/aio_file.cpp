#include "offload/aio_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "offload/aio_errors.h"
#include "runtime/durable_file.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::offload::internal {

FileEntry::~FileEntry() {
  for (FilePart& part : parts) {
    if (part.fd >= 0) (void)close(part.fd);
  }
}

StripeLocation Locate(const FileEntry& file, uint64_t logical_offset) {
  const size_t n = file.parts.size();
  if (n == 1) {
    return {0, file.base_offset + logical_offset, UINT64_MAX};
  }
  const uint64_t stripe = logical_offset / file.stripe_size;
  const uint64_t within = logical_offset % file.stripe_size;
  return {static_cast<size_t>(stripe % n),
          file.base_offset + (stripe / n) * file.stripe_size + within, file.stripe_size - within};
}

uint64_t PartBytesFor(const FileEntry& file, uint64_t logical_bytes) {
  const uint64_t n = file.parts.size();
  if (n == 1) return file.base_offset + logical_bytes;
  const uint64_t row = file.stripe_size * n;
  return file.base_offset + (logical_bytes + row - 1) / row * file.stripe_size;
}

Result<FilePart> OpenPart(const std::string& path, const AioFileOptions& options,
                          bool want_direct) {
  // O_NONBLOCK: a FIFO in the swap file's place is refused below instead of blocking the open.
  int flags = O_CLOEXEC | O_NONBLOCK | (options.read_only ? O_RDONLY : O_RDWR);
  if (options.create && !options.read_only) flags |= O_CREAT;
  if (options.truncate && !options.read_only) flags |= O_TRUNC;
  FilePart part;
  part.path = path;
  part.direct = want_direct;
  part.fd = open(path.c_str(), flags | (want_direct ? O_DIRECT : 0), 0600);
  if (part.fd < 0 && want_direct && errno == EINVAL) {
    part.direct = false;
    part.fd = open(path.c_str(), flags, 0600);
    if (part.fd >= 0) {
      SLUICE_LOG(kWarn, "aio",
                 "the filesystem of {} does not support O_DIRECT; using buffered I/O there "
                 "(throughput then depends on the page cache; put nvme_path on ext4 or xfs)",
                 std::filesystem::path(path).parent_path().string());
    }
  }
  if (part.fd < 0) {
    const int err = errno;
    SLUICE_RETURN_IF_ERROR(CheckRegularPath(path).WithContext("swap file"));
    return ErrnoStatus(err, "opening swap file {} failed: {}{}", path, ErrnoText(err),
                       err == ENOENT ? " (does the directory exist?)" : "");
  }
  if (Status s = UseAsRegularFile(part.fd, path); !s.ok()) {
    close(part.fd);
    return std::move(s).WithContext("swap file");
  }
  return part;
}

Status PreallocatePart(const FilePart& part, uint64_t bytes) {
  struct stat st {};
  SLUICE_TRY_SYS(fstat(part.fd, &st));
  if (static_cast<uint64_t>(st.st_size) >= bytes) return OkStatus();
  int rc = fallocate(part.fd, 0, 0, static_cast<off_t>(bytes));
  if (rc == 0) return OkStatus();
  const int err = errno;
  if (err == EOPNOTSUPP) {
    SLUICE_LOG_ONCE(kWarn, "aio",
                    "fallocate is not supported for {}; extending with ftruncate instead (space is "
                    "then claimed at write time, so a full disk shows up as a write error)",
                    part.path);
    if (ftruncate(part.fd, static_cast<off_t>(bytes)) == 0) return OkStatus();
    const int err2 = errno;
    return ErrnoStatus(err2, "extending swap file {} to {} bytes failed: {}", part.path, bytes,
                       ErrnoText(err2));
  }
  return ErrnoStatus(err, "preallocating swap file {} to {} bytes failed: {}{}", part.path, bytes,
                     ErrnoText(err), SpaceAdvice(err));
}

}  // namespace sluice::offload::internal
