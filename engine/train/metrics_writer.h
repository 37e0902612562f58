// metrics.jsonl: one JSON object per optimizer step (step_metrics.h), each written as one line
// with a single write(2), so a crash or a reader tailing the file never sees a torn line and the
// curve so far survives an interrupted run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/status.h"

namespace sluice::train {

class MetricsWriter {
 public:
  // Creates or truncates `path`.
  static Result<MetricsWriter> Open(const std::string& path);
  // A resumed run's: keeps the lines of `path` (if it exists) for steps 1..`last_step`, drops
  // later ones (steps the run is about to train again) and anything unparsable, replaces the
  // file atomically with what is kept, and appends after it: the curve is continued, never
  // restarted. When the file is missing, or lacks records of steps 1..`last_step`, it says so
  // (a warning naming the file and the missing steps; missing_records()).
  static Result<MetricsWriter> OpenForResume(const std::string& path, int64_t last_step);

  MetricsWriter(MetricsWriter&& other) noexcept;
  MetricsWriter& operator=(MetricsWriter&& other) noexcept;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();

  // Appends `record` as one compact line.
  Status Write(const nlohmann::ordered_json& record);

  const std::string& path() const { return path_; }
  // OpenForResume: how many of the steps before the checkpoint have no record.
  int64_t missing_records() const { return missing_records_; }

 private:
  MetricsWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_ = -1;
  std::string path_;
  int64_t missing_records_ = 0;
};

}  // namespace sluice::train
