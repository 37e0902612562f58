#include "engine/train/metrics_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "engine/train/run_files.h"
#include "runtime/foreign_call.h"

namespace sluice::train {

Result<MetricsWriter> MetricsWriter::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError("cannot open the metrics file {}: {}", path, internal::ErrnoText(errno));
  }
  return MetricsWriter(fd, path);
}

Result<MetricsWriter> MetricsWriter::OpenForResume(const std::string& path, int64_t last_step) {
  std::error_code error;
  if (std::filesystem::exists(path, error)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return IoError("cannot read the metrics file {} to continue it", path);
    std::string kept;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json record =
          nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!record.is_object()) continue;
      auto step = record.find("step");
      if (step == record.end() || !step->is_number_integer()) continue;
      if (step->get<int64_t>() > last_step) continue;
      kept += line;
      kept += '\n';
    }
    SLUICE_RETURN_IF_ERROR(WriteFileAtomically(path, kept, Durability::kUnsynced));
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError("cannot open the metrics file {}: {}", path, internal::ErrnoText(errno));
  }
  return MetricsWriter(fd, path);
}

MetricsWriter::MetricsWriter(MetricsWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status MetricsWriter::Write(const nlohmann::ordered_json& record) {
  std::string line = record.dump();
  line.push_back('\n');
  // O_APPEND makes the line one atomic append; a short write of a regular file means the disk
  // is full, which the loop turns into the errno of the next attempt.
  std::string_view rest = line;
  while (!rest.empty()) {
    ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("writing {}: {}", path_, internal::ErrnoText(errno));
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

}  // namespace sluice::train
