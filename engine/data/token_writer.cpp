#include "engine/data/token_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/data/token_format.h"
#include "runtime/foreign_call.h"

namespace sluice::data {
namespace {

Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot write '{}': {}", path, ::sluice::internal::ErrnoText(errno));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

// Writes `header` then `payload` to path.tmp, fsyncs it and renames it over `path`.
Status WriteAtomically(const std::string& path, std::span<const std::byte> header,
                       std::span<const std::byte> payload) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create '{}': {}", tmp, ::sluice::internal::ErrnoText(errno));
  Status status = WriteAll(fd, header.data(), header.size(), tmp);
  if (status.ok()) status = WriteAll(fd, payload.data(), payload.size(), tmp);
  if (status.ok() && ::fsync(fd) != 0) {
    status = IoError("cannot fsync '{}': {}", tmp, ::sluice::internal::ErrnoText(errno));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = IoError("cannot close '{}': {}", tmp, ::sluice::internal::ErrnoText(errno));
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status =
        IoError("cannot rename '{}' to '{}': {}", tmp, path, ::sluice::internal::ErrnoText(errno));
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

template <typename T>
Result<std::vector<T>> Narrow(std::span<const int32_t> ids, const std::string& path) {
  std::vector<T> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) > std::numeric_limits<T>::max()) {
      return InvalidArgumentError("cannot write '{}': token {} has id {}, outside 0..{}", path, i,
                                  ids[i], static_cast<uint64_t>(std::numeric_limits<T>::max()));
    }
    out[i] = static_cast<T>(ids[i]);
  }
  return out;
}

}  // namespace

Status WriteNanogptU16(const std::string& path, std::span<const int32_t> ids) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<uint16_t> tokens, Narrow<uint16_t>(ids, path));
  return WriteAtomically(path, {}, std::as_bytes(std::span<const uint16_t>(tokens)));
}

Status WriteLlmc(const std::string& path, std::span<const int32_t> ids, LlmcTokenKind kind) {
  if (ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidArgumentError("cannot write '{}': {} tokens exceed the llm.c int32 count", path,
                                ids.size());
  }
  std::array<int32_t, kLlmcHeaderInts> header{};
  header[2] = static_cast<int32_t>(ids.size());
  if (kind == LlmcTokenKind::kGpt2) {
    header[0] = kLlmcGpt2Magic;
    header[1] = kLlmcGpt2Version;
    SLUICE_ASSIGN_OR_RETURN(std::vector<uint16_t> tokens, Narrow<uint16_t>(ids, path));
    return WriteAtomically(path, std::as_bytes(std::span<const int32_t>(header)),
                           std::as_bytes(std::span<const uint16_t>(tokens)));
  }
  header[0] = kLlmcLlama3Magic;
  header[1] = kLlmcLlama3Version;
  SLUICE_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, Narrow<uint32_t>(ids, path));
  return WriteAtomically(path, std::as_bytes(std::span<const int32_t>(header)),
                         std::as_bytes(std::span<const uint32_t>(tokens)));
}

}  // namespace sluice::data
