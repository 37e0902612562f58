#include "offload/io_probe.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "offload/aio_errors.h"
#include "offload/aligned_buffer.h"
#include "runtime/foreign_call.h"

namespace sluice::offload {
namespace {

std::string IoUringDisabledSysctl() {
  std::ifstream in("/proc/sys/kernel/io_uring_disabled");
  int value = 0;
  if (in >> value && value != 0) {
    return value == 2 ? "; /proc/sys/kernel/io_uring_disabled is 2 (disabled for everyone)"
                      : "; /proc/sys/kernel/io_uring_disabled is 1 (only for the io_uring_group)";
  }
  return "";
}

}  // namespace

Status ProbeIoUring() {
  io_uring ring{};
  const int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    const int err = -rc;
    const char* why = err == ENOSYS  ? " (the kernel predates io_uring, Linux 5.1)"
                      : err == EPERM ? " (blocked by seccomp or a sysctl)"
                                     : "";
    return UnavailableError("io_uring_setup failed: {}{}{}", internal::ErrnoText(err), why,
                            IoUringDisabledSysctl());
  }
  Status status;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_nop(sqe);
  int submitted = io_uring_submit(&ring);
  io_uring_cqe* cqe = nullptr;
  if (submitted != 1) {
    status = UnavailableError("io_uring_enter (submit) failed: {}",
                              internal::ErrnoText(submitted < 0 ? -submitted : EIO));
  } else if (int wait = io_uring_wait_cqe(&ring, &cqe); wait < 0) {
    status = UnavailableError("io_uring_enter (wait) failed: {}", internal::ErrnoText(-wait));
  } else {
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_queue_exit(&ring);
  return status;
}

Status ProbeODirect(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    return internal::ErrnoStatus(err, "cannot probe O_DIRECT in {}: {}", dir,
                                 internal::ErrnoText(err));
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgumentError("{} is not a directory", dir);
  std::string path = dir + "/.sluice_odirect_probe_XXXXXX";
  const int plain_fd = mkstemp(path.data());
  if (plain_fd < 0) {
    const int err = errno;
    return internal::ErrnoStatus(err, "cannot create a probe file in {}: {}", dir,
                                 internal::ErrnoText(err));
  }
  close(plain_fd);
  Status status;
  const int fd = open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    status = err == EINVAL ? UnavailableError("the filesystem of {} does not support O_DIRECT", dir)
                           : internal::ErrnoStatus(err, "opening {} with O_DIRECT failed: {}", path,
                                                   internal::ErrnoText(err));
  } else {
    auto buffer = AlignedBuffer::Allocate(2 * kIoAlignment, {.lock = false});
    if (!buffer.ok()) {
      status = buffer.status();
    } else {
      char* out = buffer->as<char>();
      char* in = out + kIoAlignment;
      for (uint64_t i = 0; i < kIoAlignment; ++i) out[i] = static_cast<char>(i * 7 + 1);
      const ssize_t wrote = pwrite(fd, out, kIoAlignment, 0);
      const int werr = errno;
      const ssize_t read_back =
          wrote == static_cast<ssize_t>(kIoAlignment) ? pread(fd, in, kIoAlignment, 0) : -1;
      const int rerr = errno;
      if (wrote != static_cast<ssize_t>(kIoAlignment)) {
        status = UnavailableError("an O_DIRECT write of 4096 bytes to {} failed: {}", dir,
                                  wrote < 0 ? internal::ErrnoText(werr) : "short write");
      } else if (read_back != static_cast<ssize_t>(kIoAlignment)) {
        status = UnavailableError("an O_DIRECT read of 4096 bytes from {} failed: {}", dir,
                                  read_back < 0 ? internal::ErrnoText(rerr) : "short read");
      } else if (std::memcmp(in, out, kIoAlignment) != 0) {
        status = DataLossError("an O_DIRECT round trip in {} returned different bytes", dir);
      }
    }
    close(fd);
  }
  unlink(path.c_str());
  return status;
}

}  // namespace sluice::offload
