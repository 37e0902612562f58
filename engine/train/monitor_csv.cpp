#include "engine/train/monitor_csv.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "runtime/foreign_call.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;

// The first field of a row as a step; nullopt for anything else (a torn or foreign row).
std::optional<int64_t> RowStep(std::string_view row) {
  const size_t comma = row.find(',');
  if (comma == std::string_view::npos || comma == 0) return std::nullopt;
  int64_t step = 0;
  const char* end = row.data() + comma;
  auto [ptr, ec] = std::from_chars(row.data(), end, step);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return step;
}

// A header field the way Python's csv module quotes one (only when it has to).
std::string CsvField(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

// The monitor files of `dir`: *.csv whose first row starts with "step,".
Result<std::vector<fs::path>> MonitorFiles(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".csv" || !it->is_regular_file(ec)) continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::string header;
    if (in && std::getline(in, header) && header.starts_with("step,")) {
      files.push_back(it->path());
    }
  }
  if (ec) return IoError("cannot list the csv_monitor directory {}: {}", dir, ec.message());
  return files;
}

// Keeps the header and the rows of steps up to `last_step`.
Status TruncateAfter(const fs::path& path, int64_t last_step) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  std::string kept;
  size_t start = 0;
  bool header = true;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    // A last row without its line end was cut short by a crash: dropped.
    if (end == std::string::npos) break;
    const std::string_view row(text.data() + start, end - start);
    std::optional<int64_t> step = RowStep(row);
    if (header || (step.has_value() && *step <= last_step)) {
      kept.append(row);
      kept += '\n';
    }
    header = false;
    start = end + 1;
  }
  return WriteFileAtomically(path, kept, Durability::kUnsynced);
}

}  // namespace

Result<std::unique_ptr<CsvMonitor>> CsvMonitor::Open(const std::string& dir,
                                                     std::optional<int64_t> resumed_step) {
  SLUICE_RETURN_IF_ERROR(CreateDirectories(dir));
  SLUICE_ASSIGN_OR_RETURN(std::vector<fs::path> files, MonitorFiles(dir));
  for (const fs::path& file : files) {
    if (resumed_step.has_value()) {
      SLUICE_RETURN_IF_ERROR(TruncateAfter(file, *resumed_step));
    } else {
      std::error_code ec;
      fs::remove(file, ec);
      if (ec) {
        return IoError("cannot remove {}, an earlier run's csv_monitor file: {}", file.string(),
                       ec.message());
      }
    }
  }
  return std::unique_ptr<CsvMonitor>(new CsvMonitor(dir));
}

std::string CsvMonitor::FileName(std::string_view tag) {
  std::string name(tag);
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  return name + ".csv";
}

std::string CsvMonitor::FormatValue(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // fmt's shortest round trip is Python's repr, except that Python marks an integral float.
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

Result<int> CsvMonitor::FileFor(const std::string& tag) {
  auto it = files_.find(tag);
  if (it != files_.end()) return it->second.get();
  const std::string path = (fs::path(dir_) / FileName(tag)).string();
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return IoError("cannot open the csv_monitor file {}: {}", path, internal::ErrnoText(errno));
  }
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, FileSize(fd.get(), path));
  if (size == 0) {
    // DeepSpeed's header: the tag's last segment names the value column.
    const size_t slash = tag.rfind('/');
    const std::string_view column = slash == std::string::npos
                                        ? std::string_view(tag)
                                        : std::string_view(tag).substr(slash + 1);
    SLUICE_RETURN_IF_ERROR(AppendToFile(fd.get(), "step," + CsvField(column) + "\n", path));
  }
  const int raw = fd.get();
  files_.emplace(tag, std::move(fd));
  return raw;
}

Status CsvMonitor::Write(std::span<const MonitorEvent> events) {
  for (const MonitorEvent& event : events) {
    SLUICE_ASSIGN_OR_RETURN(int fd, FileFor(event.tag));
    SLUICE_RETURN_IF_ERROR(
        AppendToFile(fd, fmt::format("{},{}\n", event.step, FormatValue(event.value)),
                     (fs::path(dir_) / FileName(event.tag)).string()));
  }
  return OkStatus();
}

}  // namespace sluice::train
