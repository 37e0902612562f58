#include "engine/train/metrics_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "engine/train/run_files.h"
#include "runtime/foreign_call.h"
#include "runtime/json_text.h"
#include "runtime/logging.h"

namespace sluice::train {
namespace {

// "1-3, 7, 9-12" (at most a few ranges) for the steps 1..last of which `recorded` lacks.
std::string MissingSteps(const std::set<int64_t>& recorded, int64_t last) {
  constexpr int kMaxRanges = 4;
  std::string text;
  int ranges = 0;
  for (int64_t step = 1; step <= last; ++step) {
    if (recorded.contains(step)) continue;
    int64_t end = step;
    while (end + 1 <= last && !recorded.contains(end + 1)) ++end;
    if (ranges == kMaxRanges) {
      text += ", ...";
      break;
    }
    text += fmt::format("{}{}", text.empty() ? "" : ", ",
                        end == step ? fmt::format("{}", step) : fmt::format("{}-{}", step, end));
    ++ranges;
    step = end;
  }
  return text;
}

}  // namespace

Result<MetricsWriter> MetricsWriter::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError("cannot open the metrics file {}: {}", path, internal::ErrnoText(errno));
  }
  return MetricsWriter(fd, path);
}

Result<MetricsWriter> MetricsWriter::OpenForResume(const std::string& path, int64_t last_step) {
  std::error_code error;
  const bool exists = std::filesystem::exists(path, error);
  std::set<int64_t> recorded;  // steps 1..last_step with a record
  if (exists) {
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
      if (step->get<int64_t>() >= 1) recorded.insert(step->get<int64_t>());
      kept += line;
      kept += '\n';
    }
    SLUICE_RETURN_IF_ERROR(WriteFileAtomically(path, kept, Durability::kUnsynced));
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError("cannot open the metrics file {}: {}", path, internal::ErrnoText(errno));
  }
  MetricsWriter writer(fd, path);
  writer.missing_records_ = std::max<int64_t>(0, last_step) - static_cast<int64_t>(recorded.size());
  if (writer.missing_records_ > 0) {
    SLUICE_LOG(kWarn, "train",
               "{} {}: the resumed run appends from step {}, and the curve lacks steps {}", path,
               exists ? fmt::format("has records of {} of the {} steps before the checkpoint",
                                    recorded.size(), last_step)
                      : "is missing (deleted or moved?)",
               last_step + 1, MissingSteps(recorded, last_step));
  }
  return writer;
}

MetricsWriter::MetricsWriter(MetricsWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      missing_records_(other.missing_records_) {}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    missing_records_ = other.missing_records_;
  }
  return *this;
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status MetricsWriter::Write(const nlohmann::ordered_json& record) {
  std::string line = JsonText(record);
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
